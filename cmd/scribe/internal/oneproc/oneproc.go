// Package oneproc runs the lean scribe's Go code on one processor unless
// GOMAXPROCS in the environment says otherwise. A light command waits on
// one connection or one file: a second processor only adds threads that
// spin and wake each other across the cores, and each page the program's
// start writes for the first time costs the other core an interrupt (a
// TLB shootdown) while one of those threads runs there.
//
// It does so in its init, which runs among the first of the binary's
// package inits because it imports nothing that runs late (syscall
// alone), so that the inits after it already run on one processor.
package oneproc

import (
	"runtime"
	"syscall"
)

func init() {
	if v, _ := syscall.Getenv("GOMAXPROCS"); v == "" {
		runtime.GOMAXPROCS(1)
	}
}

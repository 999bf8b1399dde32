// Package queue is scribe's domain and wire format: jobs, ops, outcomes,
// reason codes, store IDs, subject and stream names, and their JSON
// encoding. It depends only on the standard library and nats.go, so that
// any program that submits jobs can link it cheaply.
//
// The wire format is documented in docs/protocol.md; Version guards it.
package queue

// Package cli is scribe's command line framework. It owns what an entry
// of the table of commands is (Command: name, synopses with their
// summaries, help, flags, run, whether it is heavy) and everything that
// reads the table: dispatch, `scribe --help`, the list in cmd/scribe's doc
// comment (List) and shell completion; flag parsing on spf13/pflag in GNU style, with
// help on stdout when asked for and a usage error of one line, with a
// hint, on stderr; the flags the client commands share, each defined
// once (--store, --lock-file, --route, --json, --autostart and
// --exit-idle, the NATS connection flags); exit codes and the mapping of
// errors to them; JSON printing; and the completion scripts of bash, zsh
// and fish.
//
// The commands live in other packages under cmd/internal, and cmd/scribed
// lists them in its table; cmd/scribe, the lean binary, lists the same
// but hands the heavy ones to scribed (Forward, FindScribed). This package links client and writer but never
// nats-server, prometheus or the MCP SDK: neither do the light commands
// (submit, status, wait, jobs, lock, stop, recover, version, completion,
// help), so that a binary of those alone stays small. The heavy ones
// (Command.Heavy) live in packages of their own.
//
// # Caveats
//
// Flags may follow arguments, up to "--", except in a flag set made
// strict (FlagSet.Strict): there the first argument ends the flags, so
// that data and argv starting with "-" reach the command as they are.
//
// A Wait flag (FlagSet.WaitVar) takes its value with "=", or as the next
// word when that reads as a duration and the flag set is strict:
// "--wait 10s" is "--wait=10s", and "--wait -- 10s" runs a command named
// 10s.
//
// A long flag spelt with one dash (-json) is refused, naming the right
// spelling: single-dash words are shorthands, and only -h is one.
package cli

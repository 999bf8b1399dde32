// Package exec owns the exec allowlist and the running of its commands:
// Command, an entry of a daemon's allowlist, with every rule about it
// (Check; the arguments and timeout a job may ask for, Admit; a lock file
// that is not the store's, CheckLock; the allowlist as a whole, Index)
// and its TOML form, the [exec.NAME] tables of a config file (Decode,
// Settings); and the process runner (Run): the environment a command
// gets, the descriptors it gets (only 0-2 and the store lock), its own
// process group, its timeout and grace, its output spooled to memory and
// capped, and how the run ended (Result).
//
// It depends on queue (op paths, outcomes, reasons) and writer/lock (the
// hold a command is handed, and the probe of a command's own lock).
// Package writer plans an exec job against a Session; the daemon's loop
// runs it with the store lock held.
//
// # Caveats
//
// A command runs with the daemon's user and a trimmed environment
// (HOME, LANG, LANGUAGE, LC_*, LOGNAME, PATH, SHELL, TMPDIR, TZ, USER,
// then its Env and scribe's SCRIBE_* variables); nothing else of the
// daemon's, its credentials included, reaches it. Its Args are passed as
// argv, never through a shell; AllowArgs patterns match an argument
// whole.
//
// A run cannot be undone or redone: a daemon that dies while a command
// runs leaves a run record, and the next holder runs the job again only
// if the command is RerunSafe.
//
// Decode looks a program named without a slash up in PATH when the file
// is read, and the daemon runs what was found, whatever PATH it runs
// with.
package exec

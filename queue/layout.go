package queue

import (
	"fmt"
	"os"
	"path/filepath"
)

// Layout is a store's private folder on disk, <store>/.scribe (MetaDir):
// the one place that knows the names of what is kept there. Root is the
// store's canonical path (see ResolveStore).
//
// The store lock, the journal, the join gate and the demand file belong
// to the writer; the daemon lock and the discovery file to the daemon;
// the queue folder to the embedded NATS server; the stranded marker is
// set by either and read by clients.
type Layout struct {
	Root string
}

// Meta is the private folder itself, <store>/.scribe (mode 0700).
func (l Layout) Meta() string { return filepath.Join(l.Root, MetaDir) }

// Lock is the default store lock file, <store>/.scribe/lock. It is never
// unlinked; its content names the holder.
func (l Layout) Lock() string { return l.file("lock") }

// Journal is the writer's bbolt journal, <store>/.scribe/journal.db.
func (l Layout) Journal() string { return l.file("journal.db") }

// Settled is the settled mark: the token of the last batch intent whose
// files are on disk, so that other processes show its outcomes (see
// docs/recovery.md). Mode 0600; never fsynced.
func (l Layout) Settled() string { return l.file("settled") }

// Attempt is the attempt mark: the sequence of the job a starting
// daemon's writer is trying and how often it has, so that a job that
// kills the writer is rejected after a few tries. Mode 0600; never
// fsynced, since only a process's death need not lose it.
func (l Layout) Attempt() string { return l.file("attempt") }

// Join is the join gate of a store's holds: children that joined a hold
// keep a shared flock on it, and the holder takes it exclusively before
// letting go.
func (l Layout) Join() string { return l.file("join") }

// Demand is the file direct writers hold a shared flock on while they wait
// for the store.
func (l Layout) Demand() string { return l.file("demand") }

// AutostartGate is the file a client holds an exclusive flock on while it
// starts the store's daemon on demand, so that callers arriving at the same
// time wait for that daemon instead of starting their own.
func (l Layout) AutostartGate() string { return l.file("autostart") }

// StopGate is the file `scribe stop` holds an exclusive flock on while it
// signals the store's daemon and waits for it, so that stops at once take
// turns: a second signal would kill the daemon at once.
func (l Layout) StopGate() string { return l.file("stop") }

// Queue is the embedded NATS server's JetStream folder, where queued jobs
// are kept.
func (l Layout) Queue() string { return l.file("jetstream") }

// DaemonLock is the file a daemon holds an exclusive flock on for its
// whole life. It is never unlinked.
func (l Layout) DaemonLock() string { return l.file("daemon.lock") }

// Discovery is the daemon's discovery file, <store>/.scribe/daemon.json
// (mode 0600): see Discovery.
func (l Layout) Discovery() string { return l.file("daemon.json") }

// DiscoveryTemp is the file the discovery file is staged in before it is
// renamed into place.
func (l Layout) DiscoveryTemp() string { return l.Discovery() + ".tmp" }

// DaemonLog is where a daemon started on demand (client autostart) writes
// its output, appended, mode 0600.
func (l Layout) DaemonLog() string { return l.file("daemon.log") }

// Config is the daemon's default config file, <store>/.scribe/config.toml,
// read by `scribe serve` when present. Like the rest of the folder it must
// be owned by the daemon's user and writable by no one else.
func (l Layout) Config() string { return l.file("config.toml") }

// Stranded is the stranded marker: see Stranded.
func (l Layout) Stranded() string { return l.file("stranded.json") }

// QueueHome is the queue-home note of a store whose queue a daemon of
// several stores keeps elsewhere (discovery.QueueHome).
func (l Layout) QueueHome() string { return l.file("queue-home.json") }

// roles name each entry of .scribe by what it is, for messages.
var roles = map[string]string{
	"lock": "store lock", "journal.db": "journal", "join": "join gate", "demand": "demand file",
	"autostart": "autostart gate", "stop": "stop gate", "jetstream": "queue folder", "daemon.lock": "daemon lock",
	"daemon.json": "discovery file", "daemon.json.tmp": "discovery file", "daemon.log": "daemon log",
	"config.toml": "config file", "stranded.json": "stranded marker",
	"queue-home.json": "queue-home note", "queue-home.json.tmp": "queue-home note", "settled": "settled mark",
	"attempt": "attempt counter",
}

// role is what path is, if it is an entry of a .scribe folder; "" if not.
func role(path string) string {
	if filepath.Base(filepath.Dir(path)) != MetaDir {
		return ""
	}
	return roles[filepath.Base(path)]
}

// CheckLockFile refuses path as a store's lock file if it is one of the
// files scribe keeps in a .scribe folder, other than the store lock
// itself (its folder's symlinks resolved; the file need not exist). A
// holder writes its identity over the lock file and empties it at
// release: the journal would lose every recorded outcome, and the daemon
// lock would have a daemon wait for ever on itself.
func CheckLockFile(path string) error {
	real := path
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		real = filepath.Join(dir, filepath.Base(path))
	}
	if r := role(real); r != "" && r != roles["lock"] {
		return refuseLockFile(path, "scribe's "+r)
	}
	// Deeper in .scribe is the queue's own (jetstream/...).
	for d := filepath.Dir(filepath.Dir(real)); d != filepath.Dir(d); d = filepath.Dir(d) {
		if filepath.Base(d) == MetaDir {
			return refuseLockFile(path, "inside scribe's "+d)
		}
	}
	return nil
}

// CheckLockFileInfo refuses fi, the file at path, as the lock file of
// l's store if it is one of the files of its .scribe folder other than
// the store lock under another name (a hard link, or a bind mount), which
// CheckLockFile, going by names, cannot tell.
func (l Layout) CheckLockFileInfo(path string, fi os.FileInfo) error {
	for _, e := range l.entries() {
		if e.dir || e.path == l.Lock() {
			continue
		}
		if own, err := os.Lstat(e.path); err == nil && os.SameFile(fi, own) {
			return refuseLockFile(path, "scribe's "+role(e.path)+", "+e.path+", under another name")
		}
	}
	return nil
}

func refuseLockFile(path, what string) error {
	return fmt.Errorf("lock file %s is %s: name a file of its own, or none for the store's own lock, .scribe/lock", path, what)
}

// entries are the files of .scribe that scribe trusts (and the queue
// folder), with the temporary files staged before a rename into place,
// for Check.
func (l Layout) entries() []struct {
	path string
	dir  bool
} {
	type entry = struct {
		path string
		dir  bool
	}
	return []entry{
		{l.Lock(), false}, {l.Journal(), false}, {l.Join(), false}, {l.Demand(), false},
		{l.AutostartGate(), false}, {l.StopGate(), false}, {l.Queue(), true}, {l.DaemonLock(), false},
		{l.Discovery(), false}, {l.DiscoveryTemp(), false}, {l.DaemonLog(), false},
		{l.Config(), false}, {l.Stranded(), false}, {l.QueueHome(), false}, {l.QueueHome() + ".tmp", false}, {l.Settled(), false},
		{l.Attempt(), false},
	}
}

func (l Layout) file(name string) string { return filepath.Join(l.Root, MetaDir, name) }

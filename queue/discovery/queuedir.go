package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/scribehq/scribe/queue"
)

// A daemon of several stores keeps their queues in one folder outside
// every store, the shared queue folder: one JetStream server can keep its
// data in one folder only, and no store's own .scribe/jetstream may hold
// another store's queue (a daemon of that store alone would take every
// queue there for its own, docs/running.md). The folder holds:
//
//	lock         the flock a daemon holds while it uses the folder; its
//	             content names the holder (QueueDirHolder), for messages
//	stores.json  the stores whose queues it has held: store ID → path
//	jetstream/   the server's JetStream data, an account per store
const (
	queueDirLock   = "lock"
	queueDirStores = "stores.json"
	queueDirData   = "jetstream"
)

// ErrQueueDirBusy means another daemon uses the shared queue folder. The
// error is a *QueueDirBusyError naming it.
var ErrQueueDirBusy = errors.New("the shared queue folder is in use")

// QueueDirBusyError names the daemon that holds a shared queue folder.
type QueueDirBusyError struct {
	Dir string
	// Holder is what the holder wrote into the lock file; nil if
	// unreadable.
	Holder *QueueDirHolder
}

func (e *QueueDirBusyError) Error() string {
	if e.Holder == nil {
		return fmt.Sprintf("the shared queue folder %s is in use by another daemon", e.Dir)
	}
	return fmt.Sprintf("the shared queue folder %s is in use by daemon pid %d (since %s, serving %d stores)",
		e.Dir, e.Holder.PID, e.Holder.Since.Format(time.RFC3339), len(e.Holder.Stores))
}

// Is makes errors.Is(err, ErrQueueDirBusy) true.
func (e *QueueDirBusyError) Is(target error) bool { return target == ErrQueueDirBusy }

// QueueDirHolder is the content of a shared queue folder's lock file: who
// holds it. For messages only; the flock is what counts.
type QueueDirHolder struct {
	PID    int       `json:"pid"`
	Since  time.Time `json:"since"`
	Stores []string  `json:"stores"`
}

// DefaultQueueDir is the shared queue folder of a daemon of several
// stores that names none: $XDG_STATE_HOME/scribe/queue, by default
// ~/.local/state/scribe/queue (on macOS ~/Library/Application
// Support/scribe/queue). One per user: a second daemon of several stores
// needs a folder of its own.
func DefaultQueueDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "scribe", "queue"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("default shared queue folder: %w", err)
	}
	if runtime.GOOS == "darwin" {
		return filepath.Join(home, "Library", "Application Support", "scribe", "queue"), nil
	}
	return filepath.Join(home, ".local", "state", "scribe", "queue"), nil
}

// QueueDir is a daemon's hold on a shared queue folder: the flock that
// makes it the folder's only user, and the folder's list of stores.
type QueueDir struct {
	dir string
	fl  *fileLock

	mu     sync.Mutex
	stores map[string]string // store ID → path
	closed bool
}

// TakeQueueDir takes the shared queue folder dir for the daemon of
// stores (their canonical paths), creating it (mode 0700) if needed. If
// another daemon uses it, it returns a *QueueDirBusyError at once (after
// the short wait that tells a probe from a holder, as Take). The folder
// and what the daemon trusts in it must be owner-only, as a store's
// .scribe (ErrInsecure).
func TakeQueueDir(ctx context.Context, dir string, stores []string, log *slog.Logger) (_ *QueueDir, err error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("shared queue folder %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("create shared queue folder: %w", err)
	}
	if err := queue.CheckPrivatePath(abs, true); err != nil {
		return nil, err
	}
	q := &QueueDir{dir: abs, stores: map[string]string{}}
	var locked bool
	if q.fl, locked, err = tryLockSettled(ctx, filepath.Join(abs, queueDirLock), "shared queue folder lock"); err != nil {
		return nil, err
	}
	if !locked {
		return nil, &QueueDirBusyError{Dir: abs, Holder: readQueueDirHolder(abs)}
	}
	defer func() {
		if err != nil {
			_ = q.fl.Unlock()
		}
	}()
	for _, c := range []struct {
		name string
		dir  bool
	}{{queueDirLock, false}, {queueDirStores, false}, {queueDirData, true}} {
		if err := queue.CheckPrivatePath(filepath.Join(abs, c.name), c.dir); err != nil {
			return nil, err
		}
	}
	if err := tightenMetaDir(abs, log); err != nil {
		return nil, err
	}
	b, err := json.Marshal(QueueDirHolder{PID: os.Getpid(), Since: time.Now().UTC(), Stores: stores})
	if err != nil {
		return nil, err
	}
	// The flock is on the open file: write the holder through another
	// descriptor, truncating, so that the lock stays where it is.
	if err := os.WriteFile(filepath.Join(abs, queueDirLock), append(b, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("shared queue folder lock: %w", err)
	}
	switch b, err := os.ReadFile(filepath.Join(abs, queueDirStores)); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", filepath.Join(abs, queueDirStores), err)
	default:
		// A damaged list only costs the paths in messages: the queues
		// are found by their store IDs.
		if err := json.Unmarshal(b, &q.stores); err != nil {
			log.Warn("the shared queue folder's list of stores is damaged; starting a new one", "file", filepath.Join(abs, queueDirStores), "err", err)
			q.stores = map[string]string{}
		}
	}
	return q, nil
}

func readQueueDirHolder(dir string) *QueueDirHolder {
	b, err := os.ReadFile(filepath.Join(dir, queueDirLock))
	if err != nil {
		return nil
	}
	var h QueueDirHolder
	if json.Unmarshal(b, &h) != nil || h.PID == 0 {
		return nil
	}
	return &h
}

// Dir is the folder, absolute.
func (q *QueueDir) Dir() string { return q.dir }

// JetStream is the folder the queue's server keeps its data in (its
// store directory), DIR/jetstream.
func (q *QueueDir) JetStream() string { return filepath.Join(q.dir, queueDirData) }

// Stores is the folder's list of stores whose queues it has held: store
// ID → the store's path when it was last served from the folder.
func (q *QueueDir) Stores() map[string]string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.stores)
}

// Remember records in the folder's list that the queue of the store at
// path, whose ID is id, is kept here, or with path "" that it is not any
// more; the list is written at once (mode 0600, replaced atomically).
func (q *QueueDir) Remember(id, path string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errors.New("remember store: the shared queue folder is released")
	}
	if path == "" {
		delete(q.stores, id)
	} else {
		q.stores[id] = path
	}
	b, err := json.MarshalIndent(q.stores, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(q.dir, queueDirStores), append(b, '\n'))
}

// Close releases the folder. The lock file and the data stay. A second
// Close does nothing.
func (q *QueueDir) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	return q.fl.Unlock()
}

// writeFileAtomic writes path (mode 0600) through a temporary file
// renamed over it, so that a reader never sees half of it.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := queue.WritePrivate(tmp, data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // WriteFile keeps an existing file's mode
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

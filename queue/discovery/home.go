package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/scribehq/scribe/queue"
)

// QueueHome says where a store's queued jobs are kept when that is not
// the store's own queue folder (queue.Layout.Queue): the shared queue
// folder of the daemon of several stores that served it last. It is the
// note <store>/.scribe/queue-home.json, which only a daemon of the store
// writes, under its daemon lock; without it the jobs are in the store's
// own folder. A daemon that starts for the store takes its jobs over from
// where the note says before it serves (embednats.Server.TakeOver), so
// that they are kept in one place only, and applied first.
type QueueHome struct {
	// Dir is the shared queue folder (QueueDir.Dir).
	Dir string `json:"dir"`
	// StoreID is the store's ID when the note was written: a store moved
	// since has another, and its jobs are queued under this one.
	StoreID string `json:"store_id"`
	// PID and Since name the daemon that wrote the note, for messages.
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
}

// JetStream is the folder the shared queue folder's server keeps its data
// in (QueueDir.JetStream).
func (h *QueueHome) JetStream() string { return filepath.Join(h.Dir, queueDirData) }

func queueHomePath(store string) string { return queue.Layout{Root: store}.QueueHome() }

// ReadQueueHome reads the queue-home note of store (its canonical path):
// nil, nil when there is none, so that the store's jobs are in its own
// queue folder.
func ReadQueueHome(store string) (*QueueHome, error) {
	path := queueHomePath(store)
	b, err := queue.ReadPrivate(path, 1<<20)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, queue.ErrInsecure):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var h QueueHome
	if err := json.Unmarshal(b, &h); err != nil || h.Dir == "" || !filepath.IsAbs(h.Dir) {
		return nil, fmt.Errorf("read %s: not a queue-home note (want {\"dir\": ABSOLUTE_PATH, …}): remove it only if the folder it names holds no jobs of this store", path)
	}
	return &h, nil
}

// SetQueueHome writes the store's queue-home note (mode 0600, replaced
// atomically): its jobs are kept in the shared queue folder dir, under
// the store's current ID.
func (l *Lock) SetQueueHome(dir string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("set queue home: the daemon lock is released")
	}
	b, err := json.MarshalIndent(QueueHome{Dir: dir, StoreID: queue.StoreID(l.layout.Root), PID: os.Getpid(), Since: time.Now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(queueHomePath(l.layout.Root), append(b, '\n'))
}

// ClearQueueHome removes the store's queue-home note: its jobs, if any,
// are in its own queue folder.
func (l *Lock) ClearQueueHome() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("clear queue home: the daemon lock is released")
	}
	if err := os.Remove(queueHomePath(l.layout.Root)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove queue-home note: %w", err)
	}
	return nil
}

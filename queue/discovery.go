package queue

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Discovery is the content of <store>/.scribe/daemon.json, written by a
// daemon (mode 0600) once it serves the store. Clients trust it only while
// the daemon lock (DaemonLockPath) is held.
type Discovery struct {
	URL      string    `json:"url"`
	User     string    `json:"user"`
	Password string    `json:"password"`
	PID      int       `json:"pid"`
	Version  string    `json:"version"`
	Store    string    `json:"store"`
	StoreID  string    `json:"store_id"`
	Started  time.Time `json:"started"`
}

// DiscoveryPath is a store's discovery file.
func DiscoveryPath(store string) string {
	return filepath.Join(store, MetaDir, "daemon.json")
}

// DaemonLockPath is the file a daemon holds an exclusive flock on for its
// whole life.
func DaemonLockPath(store string) string {
	return filepath.Join(store, MetaDir, "daemon.lock")
}

// ReadDiscovery reads a store's discovery file. It does not check that the
// daemon is alive: only a held daemon lock says that.
func ReadDiscovery(store string) (*Discovery, error) {
	b, err := os.ReadFile(DiscoveryPath(store))
	if err != nil {
		return nil, err
	}
	var d Discovery
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("read %s: %w", DiscoveryPath(store), err)
	}
	return &d, nil
}

// StrandedPath is the marker saying that jobs may wait in the store's
// queue while no daemon runs: a daemon stopped with jobs queued, or one
// was killed. Until a daemon has served the store and seen its queue
// empty, a direct write by the prefer route would overtake those jobs.
func StrandedPath(store string) string {
	return filepath.Join(store, MetaDir, "stranded.json")
}

// Stranded returns why the store's queue may hold jobs no daemon serves,
// or "" if its stranded marker is absent. A killed daemon's discovery file
// says the same until the next daemon turns it into the marker.
func Stranded(store string) string {
	if b, err := os.ReadFile(StrandedPath(store)); err == nil {
		var m struct {
			Why string `json:"why"`
		}
		if json.Unmarshal(b, &m) != nil || m.Why == "" {
			return "a daemon left jobs queued"
		}
		return m.Why
	}
	if d, err := ReadDiscovery(store); err == nil {
		return fmt.Sprintf("daemon pid %d did not shut down cleanly", d.PID)
	}
	return ""
}

// MarkStranded writes the stranded marker (mode 0600) with why.
func MarkStranded(store, why string) error {
	b, err := json.Marshal(struct {
		Why string    `json:"why"`
		At  time.Time `json:"at"`
	}{why, time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := os.WriteFile(StrandedPath(store), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("mark queue stranded: %w", err)
	}
	return nil
}

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

// StrandedPath is the marker a daemon leaves when it stops with jobs still
// in its queue: until a daemon serves the store again and drains them, a
// direct write by the prefer route would overtake them.
func StrandedPath(store string) string {
	return filepath.Join(store, MetaDir, "stranded.json")
}

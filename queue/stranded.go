package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// Stranded says that jobs may wait in a store's queue while no daemon
// serves it: a daemon stopped with jobs queued, or one was killed. Until a
// daemon has served the store and seen its queue empty, a direct write by
// the prefer route would overtake those jobs.
//
// The marker is <store>/.scribe/stranded.json (Layout.Stranded), written
// by MarkStranded and removed by LiftStranded; a killed daemon's
// discovery file says the same until the next daemon turns it into the
// marker.
type Stranded struct {
	// Why says what left the jobs, e.g. "daemon pid 42 stopped with 3
	// jobs queued".
	Why string `json:"why"`
	// At is when the marker was written; zero when unknown.
	At time.Time `json:"at,omitzero"`
}

// String is Why.
func (s *Stranded) String() string { return s.Why }

// ReadStranded returns the store's stranded state, or nil if no jobs can
// be waiting without a daemon: no marker and no discovery file left
// behind. Call it only while no daemon serves the store: a live daemon's
// discovery file reads as stranded too.
func ReadStranded(store string) (*Stranded, error) {
	l := Layout{Root: store}
	if err := l.Check(); err != nil {
		return nil, err
	}
	path := l.Stranded()
	b, err := ReadPrivate(path, maxMetaFile)
	switch {
	case errors.Is(err, ErrInsecure):
		return nil, err
	case err == nil:
		var s Stranded
		if json.Unmarshal(b, &s) != nil || s.Why == "" {
			return &Stranded{Why: "a daemon left jobs queued"}, nil
		}
		return &s, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read stranded marker: %w", err)
	}
	if d, err := ReadDiscovery(store); err == nil {
		return &Stranded{Why: fmt.Sprintf("daemon pid %d did not shut down cleanly", d.PID), At: d.Started}, nil
	}
	return nil, nil
}

// MarkStranded writes the store's stranded marker (mode 0600) with why.
func MarkStranded(store, why string) error {
	b, err := json.Marshal(Stranded{Why: why, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	l := Layout{Root: store}
	if err := l.Check(); err != nil {
		return err
	}
	if err := WritePrivate(l.Stranded(), append(b, '\n')); err != nil {
		if errors.Is(err, ErrInsecure) {
			return err
		}
		return fmt.Errorf("mark queue stranded: %w", err)
	}
	return nil
}

// LiftStranded removes the store's stranded marker, if any. Only a daemon
// that has seen the store's queue empty may call it.
func LiftStranded(store string) error {
	if err := os.Remove(Layout{Root: store}.Stranded()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lift stranded marker: %w", err)
	}
	return nil
}

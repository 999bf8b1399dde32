package discovery

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/scribehq/scribe/queue"
)

// The daemon trusts its .scribe folder with the credentials it hands out
// and with the queue. Anyone who could write there could replace the
// discovery file (sending clients, and their data, to a server of theirs),
// plant a symlink where the daemon writes, or inject jobs into the queue.
// So Take refuses the store unless the folder and the files in it that the
// daemon trusts pass the rules every entrance holds .scribe to
// (queue.CheckPrivate).

// checkMetaDir creates the store's .scribe folder if needed and checks it.
// It runs before the daemon lock is taken, since taking it creates a file
// in the folder.
func checkMetaDir(l queue.Layout) error {
	return l.Make()
}

// checkMetaFiles checks what the daemon trusts inside .scribe: every file
// of the layout, its own (the daemon lock, the discovery file, the queue's
// folder, the queue-home note) and its writer's (the store lock, the
// journal). It runs once the daemon lock is held, before anything is
// written: a discovery file left behind by a killed daemon is checked
// before it is removed, so that a tampered one is reported, not silently
// replaced; and a journal another user swapped in stops the start, not the
// first job.
func checkMetaFiles(l queue.Layout) error {
	return l.Check()
}

// tightenMetaDir makes a safe but readable .scribe folder (or shared
// queue folder) owner-only (0700), as scribe creates it: the queue and
// the journal hold the content of every job.
func tightenMetaDir(meta string, log *slog.Logger) error {
	fi, err := os.Stat(meta)
	if err != nil {
		return fmt.Errorf("check %s: %w", meta, err)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(meta, 0o700); err != nil {
		return fmt.Errorf("make %s owner-only: %w", meta, err)
	}
	log.Info("made the folder owner-only: it holds queued jobs", "path", meta, "was", fi.Mode().Perm().String())
	return nil
}

// warnSharedStore warns when other users may rename entries of the store
// folder: they could swap the .scribe folder for one of theirs. Their
// writes to the store's files are theirs to make; scribe gives them
// nothing more.
func warnSharedStore(store string, log *slog.Logger) {
	fi, err := os.Stat(store)
	if err != nil {
		return
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		log.Warn("the store folder is writable by other users: they can replace its .scribe folder and the discovery file clients trust; make it writable by its owner only",
			"store", store, "mode", fi.Mode().String())
	}
}

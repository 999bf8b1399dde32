package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"syscall"

	"github.com/scribehq/scribe/queue"
)

// The daemon trusts its .scribe folder with the credentials it hands out
// and with the queue. Anyone who could write there could replace the
// discovery file (sending clients, and their data, to a server of theirs),
// plant a symlink where the daemon writes, or inject jobs into the queue.
// So Take refuses the store unless the folder and the files in it that the
// daemon trusts are owned by the daemon's user and writable by no one else.

// checkMetaDir checks the store's .scribe folder itself. It runs before the
// daemon lock is taken, since taking it creates a file in the folder.
func checkMetaDir(meta string) error {
	return checkOwnerOnly(meta, true, false)
}

// checkMetaFiles checks what the daemon trusts inside .scribe. It runs once
// the daemon lock is held, before anything is written: a discovery file
// left behind by a killed daemon is checked before it is removed, so that a
// tampered one is reported, not silently replaced.
// The queue's folder is checked too: an embedded server keeps the jobs
// there, and no daemon with an external server needs one that others
// could fill.
func checkMetaFiles(l queue.Layout) error {
	for _, c := range []struct {
		path string
		dir  bool
	}{
		{l.DaemonLock(), false},
		{l.Discovery(), false},
		{l.DiscoveryTemp(), false},
		{l.Queue(), true},
		// The queue-home note says where the daemon takes jobs from.
		{queueHomePath(l.Root), false},
		{queueHomePath(l.Root) + ".tmp", false},
	} {
		if err := checkOwnerOnly(c.path, c.dir, true); err != nil {
			return err
		}
	}
	return nil
}

// checkOwnerOnly refuses a path that another user could change: a symlink,
// the wrong kind of file, one owned by another user, or one that is group-
// or world-writable. A missing path is accepted when optional.
func checkOwnerOnly(path string, dir, optional bool) error {
	fi, err := os.Lstat(path)
	if optional && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	return CheckOwnerOnly(path, fi, dir)
}

// CheckOwnerOnly applies the owner-only rules of .scribe to fi, what Lstat
// or an open file's Stat says of path (a folder if dir): not a symlink, the
// right kind, owned by this process's user, neither group- nor
// world-writable. The error is an *InsecureError.
func CheckOwnerOnly(path string, fi fs.FileInfo, dir bool) error {
	mode := fi.Mode()
	kind, fix := "file", "chmod 600 "+path
	if dir {
		kind, fix = "folder", "chmod 700 "+path
	}
	switch {
	case mode&fs.ModeSymlink != 0:
		return &InsecureError{Path: path, Problem: "is a symlink; scribe wants a real " + kind + " here", Fix: "remove it"}
	case dir && !mode.IsDir(), !dir && !mode.IsRegular():
		return &InsecureError{Path: path, Problem: fmt.Sprintf("is not a %s (mode %s)", kind, mode), Fix: "remove it"}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return &InsecureError{
			Path:    path,
			Problem: fmt.Sprintf("is owned by uid %d, not by the daemon's user (uid %d)", st.Uid, os.Geteuid()),
			Fix:     "run the daemon as its owner, or remove it",
		}
	}
	switch perm := mode.Perm(); {
	case perm&0o002 != 0:
		return &InsecureError{Path: path, Problem: fmt.Sprintf("is world-writable (mode %s)", mode), Fix: "check its content, then " + fix}
	case perm&0o020 != 0:
		return &InsecureError{Path: path, Problem: fmt.Sprintf("is group-writable (mode %s)", mode), Fix: "check its content, then " + fix}
	}
	return nil
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

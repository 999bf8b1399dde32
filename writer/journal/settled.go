package journal

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/scribehq/scribe/queue"
)

// An intent's outcomes stand once its files are on disk. The writer that
// carried it out knows so at once; every other process learns it from the
// settled mark, <store>/.scribe/settled: the token of the last intent
// carried out, written over in place with one pwrite and no fsync, before
// any caller hears of the batch. A SIGKILL does not lose it (the kernel
// has the write); a power loss or an OS crash may, and then the intent
// looks interrupted, and its outcomes provisional, until the next holder
// redoes it: the redo is harmless.
//
// The mark says one of two things. Synced (Settle): the intent's files
// (and folders) were fsynced before the mark was written, which holds
// whatever happens next. Written (SettleWritten): the files were written
// but not yet synced, so the mark holds only while the machine has not
// restarted since (the page cache has the files): it names the boot it
// was written in, and a look-up of a later boot, or one that cannot tell
// its boot, ignores it. A holder ignores it always, and redoes the
// intent: a disk can lose what was not synced without the machine
// restarting (a drive cut off), and then only that redo brings the bytes
// back. So the mark only ever names to a holder an intent whose files
// are durable, and losing or tearing it errs on the side of a redo.

// Token tells one intent apart from every other, in this journal or
// any journal that replaces it: a mark left by one intent never settles
// another. Record returns it, Settle takes it.
type Token [16]byte

func newIntentToken() (Token, error) {
	var t Token
	_, err := rand.Read(t[:])
	return t, err
}

// The mark's only line: markPrefix and the token in hex for a synced
// mark, which is what an earlier version wrote and reads; writtenPrefix,
// the token and the boot for a written one, which an earlier version does
// not read, and so redoes.
const (
	markPrefix    = "scribe settled v1 "
	writtenPrefix = "scribe written v1 "
)

// bootBytes is how much of the SHA-256 of the boot ID a mark keeps.
const bootBytes = 16

// markLen is the length of every mark, so that writing one over the last
// leaves nothing of it behind: a synced mark is padded after its line.
const markLen = len(writtenPrefix) + 2*len(Token{}) + 1 + 2*bootBytes + 1

// markBytes is the mark's content for t: synced if boot is empty, else
// written in that boot.
func markBytes(t Token, boot string) []byte {
	var b []byte
	if boot == "" {
		b = fmt.Appendf(nil, "%s%s\n", markPrefix, hex.EncodeToString(t[:]))
	} else {
		b = fmt.Appendf(nil, "%s%s %s\n", writtenPrefix, hex.EncodeToString(t[:]), boot)
	}
	return append(b, bytes.Repeat([]byte(" "), markLen-len(b))...)
}

// parseMark returns the token a mark's content names, if the mark holds
// in boot (the reader's, "" if unknown), and whether it says the files
// were synced.
func parseMark(b []byte, boot string) (t Token, synced, ok bool) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	rest, synced := bytes.CutPrefix(line, []byte(markPrefix))
	if !synced {
		var written bool
		if rest, written = bytes.CutPrefix(line, []byte(writtenPrefix)); !written {
			return t, false, false
		}
		var at []byte
		if rest, at, written = bytes.Cut(rest, []byte(" ")); !written || boot == "" || string(at) != boot {
			return t, false, false
		}
	}
	if hex.DecodedLen(len(rest)) != len(t) {
		return t, false, false
	}
	if _, err := hex.Decode(t[:], rest); err != nil {
		return t, false, false
	}
	return t, synced, true
}

// bootPath names the running kernel's boot: a new random ID each boot.
var bootPath = "/proc/sys/kernel/random/boot_id"

// currentBoot identifies the running boot in a mark, or is "" where the
// system does not say (then no written mark is ever trusted or written).
func currentBoot() string {
	b, err := os.ReadFile(bootPath)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	sum := sha256.Sum256(bytes.TrimSpace(b))
	return hex.EncodeToString(sum[:bootBytes])
}

// markPath is the settled mark beside the journal at journalPath.
func markPath(journalPath string) string {
	return queue.Layout{Root: filepath.Dir(filepath.Dir(journalPath))}.Settled()
}

// openMark opens the settled mark: for writing (creating it, mode 0600),
// or for reading, held to the rules of .scribe (queue.OpenPrivate): a
// forged mark would show outcomes whose files are not on disk.
func openMark(path string, write bool) (*os.File, error) {
	if write {
		return queue.OpenPrivate(path, os.O_RDWR|os.O_CREATE, 0o600)
	}
	return queue.OpenPrivate(path, os.O_RDONLY, 0)
}

// readMark returns the token the settled mark names, if it names one
// this process can trust, and whether its files were synced.
func readMark(path, boot string) (t Token, synced, ok bool) {
	f, err := openMark(path, false)
	if err != nil {
		return t, false, false
	}
	defer f.Close()
	b := make([]byte, 2*markLen)
	n, _ := f.ReadAt(b, 0)
	return parseMark(b[:n], boot)
}

// writeMark records in f that the intent of token t is carried out:
// synced if boot is empty, else written in that boot.
func writeMark(f *os.File, t Token, boot string) error {
	if _, err := f.WriteAt(markBytes(t, boot), 0); err != nil {
		return fmt.Errorf("write settled mark: %w", err)
	}
	return nil
}

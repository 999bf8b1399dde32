package journal

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/scribehq/scribe/queue"
)

// An intent's outcomes stand once its files are on disk. The writer that
// carried it out knows so at once; every other process learns it from the
// settled mark, <store>/.scribe/settled: the token of the last intent
// whose files (and folders) were fsynced, written over in place with one
// pwrite and no fsync, before any caller hears of the batch. A SIGKILL
// does not lose it (the kernel has the write); a power loss or an OS
// crash may, and then the intent looks interrupted, and its outcomes
// provisional, until the next holder redoes it: the redo is harmless. The
// mark can only ever name an intent whose files were durable before it
// was written, so losing or tearing it errs on the side of a redo.

// Token tells one intent apart from every other, in this journal or
// any journal that replaces it: a mark left by one intent never settles
// another. Record returns it, Settle takes it.
type Token [16]byte

func newIntentToken() (Token, error) {
	var t Token
	_, err := rand.Read(t[:])
	return t, err
}

// markPrefix starts the mark's only line; the token follows in hex.
const markPrefix = "scribe settled v1 "

// markBytes is the mark's content for t: always the same length, so that
// writing it over the last one leaves nothing of it behind.
func markBytes(t Token) []byte {
	return fmt.Appendf(nil, "%s%s\n", markPrefix, hex.EncodeToString(t[:]))
}

// parseMark returns the token a mark's content names.
func parseMark(b []byte) (Token, bool) {
	var t Token
	line, _, _ := bytes.Cut(b, []byte("\n"))
	rest, ok := bytes.CutPrefix(line, []byte(markPrefix))
	if !ok || hex.DecodedLen(len(rest)) != len(t) {
		return t, false
	}
	if _, err := hex.Decode(t[:], rest); err != nil {
		return t, false
	}
	return t, true
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
// this process can trust.
func readMark(path string) (Token, bool) {
	f, err := openMark(path, false)
	if err != nil {
		return Token{}, false
	}
	defer f.Close()
	b := make([]byte, 2*len(markBytes(Token{})))
	n, _ := f.ReadAt(b, 0)
	return parseMark(b[:n])
}

// writeMark records in f that the intent of token t is carried out.
func writeMark(f *os.File, t Token) error {
	if _, err := f.WriteAt(markBytes(t), 0); err != nil {
		return fmt.Errorf("write settled mark: %w", err)
	}
	return nil
}

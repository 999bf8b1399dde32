package journal

import (
	"io/fs"

	"github.com/scribehq/scribe/queue"
)

// Kinds of Change.
const (
	ChangeWrite  = "write"  // replace the whole file with Data
	ChangeAppend = "append" // add Data at the end of the file (it had Base bytes when decided)
	ChangeRemove = "remove" // the file is gone
	ChangeMkdir  = "mkdir"  // the folder exists (the batch made it and emptied it again)
)

// Change is a batch's net effect on one file, stated so that carrying
// it out again after a partial attempt has the same result as once.
type Change struct {
	Path string      `json:"path"`
	Kind string      `json:"kind"`
	Data []byte      `json:"data,omitempty"`
	Base int64       `json:"base,omitempty"` // append: the file's size when the batch was decided
	Mode fs.FileMode `json:"mode,omitempty"` // the replaced file's mode; 0 for a new file
	New  bool        `json:"new,omitempty"`  // the file did not exist before the batch
}

// Intent is a batch decided but not yet on disk: committed to the journal
// before the first file changes (Record), carried out (Settle) or
// dropped by the commit that records the outcomes. If it is found on
// opening the journal (Pending), the batch is redone.
type Intent struct {
	Epoch    uint64           `json:"epoch"`
	Changes  []Change         `json:"changes"`
	Outcomes []*queue.Outcome `json:"outcomes"`
	LastSeq  uint64           `json:"last_seq"`
	// Carried are the IDs of outcomes recorded with an earlier intent
	// whose changes this one carries again, their files not yet synced:
	// they stay provisional with it (Record keeps them in the pending
	// outcomes, which is where a later holder finds them).
	Carried []string `json:"-"`
}

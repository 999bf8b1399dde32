package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/scribehq/scribe/writer"
)

// A class is purged up to its highest decided job, but never past one of
// its own taken and still undecided: jobs that joined an exec run, and
// high jobs, are decided ahead of jobs queued between them, which must
// survive a crash.
func TestPurgeFloorKeepsUndecidedJobs(t *testing.T) {
	normal, high := &class{}, &class{high: true}
	own := func(seq uint64) item { return item{cls: normal, e: writer.Entry{Seq: seq}} }
	former := item{e: writer.Entry{Seq: 2}}
	tests := []struct {
		name      string
		committed uint64
		ahead     []item
		want      uint64
	}{
		{"nothing in hand", 7, nil, 7},
		{"undecided jobs after the decided", 7, []item{own(8), own(9)}, 7},
		{"a joiner decided past jobs still ahead", 9, []item{own(5), own(6)}, 4},
		{"the lowest undecided counts, in any order", 9, []item{own(8), own(3)}, 2},
		{"a former path's job has another stream's sequence", 9, []item{former}, 9},
		{"another class's undecided job does not hold this one back", 9, []item{{cls: high, e: writer.Entry{Seq: 3}}}, 9},
		{"nothing decided yet", 0, []item{own(1)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			normal.committed = tt.committed
			assert.Equal(t, tt.want, purgeFloor(normal, tt.ahead))
		})
	}
}

package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/scribehq/scribe/writer"
)

// The queue is purged up to the last job taken, but never past one taken
// and still undecided, nor past one of either class not taken yet: high
// jobs, and jobs that joined an exec run, are decided ahead of jobs
// queued between them, which must survive a crash.
func TestFloorBelowKeepsUndecidedJobs(t *testing.T) {
	normal, high := &class{}, &class{high: true}
	own := func(seq uint64) item { return item{cls: normal, e: writer.Entry{Seq: seq}} }
	former := item{e: writer.Entry{Seq: 2}}
	tests := []struct {
		name      string
		lastTaken uint64
		untaken   []uint64
		ahead     []item
		want      uint64
	}{
		{"nothing in hand, nothing left", 7, nil, nil, 7},
		{"undecided jobs after the decided", 9, nil, []item{own(8), own(9)}, 7},
		{"a joiner decided past jobs still ahead", 9, nil, []item{own(5), own(6)}, 4},
		{"the lowest undecided counts, in any order", 9, nil, []item{own(8), own(3)}, 2},
		{"a former path's job has another stream's sequence", 9, nil, []item{former}, 9},
		{"a high job undecided holds the normal ones back", 9, nil, []item{{cls: high, e: writer.Entry{Seq: 3}}}, 2},
		{"a normal job not taken yet, behind the high ones decided", 9, []uint64{4}, nil, 3},
		{"the oldest job not taken of either class", 20, []uint64{12, 15}, []item{own(18)}, 11},
		{"nothing taken yet", 0, []uint64{1}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, floorBelow(tt.lastTaken, tt.untaken, tt.ahead))
		})
	}
}

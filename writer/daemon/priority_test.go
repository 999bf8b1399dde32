package daemon

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
)

// dataMsg is a queued message with a body only.
type dataMsg struct {
	jetstream.Msg
	data []byte
}

func (m dataMsg) Data() []byte { return m.data }

func job(id string, p queue.Priority, exec bool) item {
	op := queue.Op{Kind: queue.OpAppend, Path: "f", Data: []byte("x")}
	if exec {
		op = queue.Op{Kind: queue.OpExec, Name: "cmd"}
	}
	return item{m: dataMsg{data: []byte(id)}, e: writer.Entry{Job: &queue.Job{ID: id, Priority: p, Ops: []queue.Op{op}}}}
}

func ids(items []item) []string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = it.e.Job.ID
	}
	return s
}

// Batches of high jobs go first, in order, the normal jobs keeping their
// places; after MaxHighBatches of them in a row while normal jobs wait,
// one batch of normal jobs.
func TestPickAndTakeBatch(t *testing.T) {
	hi, no := queue.PriorityHigh, queue.PriorityNormal
	w := &Writer{cfg: WriterConfig{Settings: Settings{BatchSize: 2}}}
	w.ahead = []item{job("n1", no, false), job("h1", hi, false), job("n2", no, false), job("h2", hi, false), job("h3", hi, false)}
	high := w.pick()
	assert.True(t, high)
	assert.Equal(t, []string{"h1", "h2"}, ids(w.takeBatch(high)), "high jobs, in order, up to the batch size")
	assert.Equal(t, []string{"n1", "n2", "h3"}, ids(w.ahead), "the others keep their places")

	// An exec job of the class ends its batch: it runs alone.
	w.ahead = []item{job("h4", hi, false), job("n3", no, false), job("hx", hi, true), job("h5", hi, false)}
	assert.Equal(t, []string{"h4"}, ids(w.takeBatch(true)))
	assert.Equal(t, []string{"n3", "hx", "h5"}, ids(w.ahead))

	// Starvation: with normal jobs waiting, MaxHighBatches high batches,
	// then a normal one, then high ones again.
	w = &Writer{cfg: WriterConfig{Settings: Settings{BatchSize: 1}}}
	for i := 0; i < 10; i++ {
		w.ahead = append(w.ahead, job("h", hi, false))
	}
	w.ahead = append(w.ahead, job("n", no, false), job("n", no, false))
	var got []bool
	for len(w.ahead) > 0 {
		high := w.pick()
		got = append(got, high)
		w.takeBatch(high)
	}
	want := []bool{true, true, true, true, false, true, true, true, true, false, true, true}
	assert.Equal(t, want, got)
	assert.Equal(t, 4, queue.MaxHighBatches, "want assumes it")

	// Only normal jobs: no count of high batches carries over.
	w.highRun = 3
	w.ahead = []item{job("n", no, false)}
	assert.False(t, w.pick())
	assert.Equal(t, 0, w.highRun)
}

package tests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// crashRounds is how many times TestSIGKILLRestart kills the daemon:
// $SCRIBE_CRASH_ROUNDS, default 5.
func crashRounds(t *testing.T) int {
	n := 5
	if s := os.Getenv("SCRIBE_CRASH_ROUNDS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err, "SCRIBE_CRASH_ROUNDS")
	}
	return n
}

// producerJob is producer p's i-th job: an append, a put, a merge or a
// multi-op job, in turn.
func producerJob(t *testing.T, dir string, p, i int) []string {
	id := fmt.Sprintf("p%d-%d", p, i)
	switch i % 4 {
	case 0:
		return []string{"append", "log.txt", fmt.Sprintf("%d %d\n", p, i)}
	case 1:
		return []string{"put", fmt.Sprintf("put-%d.txt", p), strings.Repeat(id+" ", 200)}
	case 2:
		return []string{"merge", "state.json", fmt.Sprintf(`{"%s": %d}`, id, i)}
	}
	f := filepath.Join(dir, id+".json")
	job := fmt.Sprintf(`{"ops":[{"op":"append","path":"multi-%d.txt","data":"%d\n"},{"op":"merge","path":"state.json","data":"{\"%s\": %d}"}]}`, p, i, id, i)
	require.NoError(t, os.WriteFile(f, []byte(job), 0o644))
	return []string{"--job", f}
}

// Producers submit appends, puts, merges and multi-op
// jobs with known IDs while the daemon is SIGKILLed at random moments and
// restarted. A submit that fails is retried with the same ID. In the end
// every job is applied exactly once, in its producer's order; every outcome
// a producer received matches the journal; no file is torn.
func TestSIGKILLRestart(t *testing.T) {
	t.Parallel()
	heavy(t)
	store := newStore(t)
	dir := t.TempDir()
	d := startDaemon(t, store)

	const producers, jobs = 4, 40
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	received := map[string]queue.Outcome{}
	failures := make(chan string, producers)
	for p := range producers {
		wg.Go(func() {
			for i := range jobs {
				id := fmt.Sprintf("p%d-%d", p, i)
				args := append([]string{"submit", "--store", store, "--route", "require", "--id", id, "--json"}, producerJob(t, dir, p, i)...)
				if i%2 == 1 {
					args = append([]string{args[0], "--wait=10s"}, args[1:]...) // half of them wait for their outcome
				}
				for try := 0; ; try++ {
					r := scribe(t, "", args...)
					if r.code == 0 {
						var o queue.Outcome
						if json.Unmarshal([]byte(r.stdout), &o) == nil && o.Status != "queued" {
							mu.Lock()
							received[id] = o
							mu.Unlock()
						}
						break
					}
					if stop.Load() || try > 500 {
						failures <- fmt.Sprintf("%s never accepted: exit %d: %s", id, r.code, r.stderr)
						return
					}
					// The daemon is down (69) or restarting (75): retry
					// the same ID after a pause, as a hook would.
					time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
				}
			}
		})
	}

	rounds := crashRounds(t)
	for round := range rounds {
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond) // a random instant, not a synchronisation
		d.kill(t)
		if (round+1)%25 == 0 || round+1 == rounds {
			t.Logf("round %d: killed the daemon", round+1)
		}
		d = startDaemon(t, store)
	}
	wg.Wait()
	stop.Store(true)
	close(failures)
	for f := range failures {
		t.Error(f)
	}

	// Everything accepted is applied once the daemon drains the queue.
	for p := range producers {
		last := fmt.Sprintf("p%d-%d", p, jobs-1)
		require.Eventually(t, func() bool {
			return scribe(t, "", "status", "--store", store, last).code == 0
		}, 60*time.Second, 50*time.Millisecond, "%s applied", last)
	}
	var lines []string
	lines = strings.Split(strings.TrimSuffix(readFile(t, filepath.Join(store, "log.txt")), "\n"), "\n")
	assert.Len(t, lines, producers*jobs/4, "appends: none lost, none doubled")
	next := make([]int, producers)
	for _, l := range lines {
		var p, i int
		_, err := fmt.Sscanf(l, "%d %d", &p, &i)
		require.NoError(t, err, "torn line %q", l)
		assert.Equal(t, next[p], i, "producer %d: line %q out of order or doubled", p, l)
		next[p] = i + 4
	}
	var state map[string]int
	require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(store, "state.json"))), &state), "state.json parses")
	for p := range producers {
		lastPut := fmt.Sprintf("p%d-%d", p, jobs-3)
		assert.Equal(t, strings.Repeat(lastPut+" ", 200), readFile(t, filepath.Join(store, fmt.Sprintf("put-%d.txt", p))), "the last put, whole")
		var multi string
		for i := 3; i < jobs; i += 4 {
			multi += fmt.Sprintf("%d\n", i)
		}
		assert.Equal(t, multi, readFile(t, filepath.Join(store, fmt.Sprintf("multi-%d.txt", p))), "multi-op appends once each, in order")
		for i := range jobs {
			if i%4 >= 2 {
				assert.Equal(t, i, state[fmt.Sprintf("p%d-%d", p, i)], "merge p%d-%d", p, i)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, received)
	for id, got := range received {
		r := scribe(t, "", "status", "--store", store, "--json", id)
		require.Equal(t, 0, r.code, r.stderr)
		var recorded queue.Outcome
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &recorded))
		assert.Equal(t, recorded, got, "%s: the outcome the caller heard is the recorded one", id)
	}
	t.Logf("%d rounds; %d outcomes received and checked", rounds, len(received))
}

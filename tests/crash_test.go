package tests

import (
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

// Producers keep submitting while the daemon is SIGKILLed at random
// moments and restarted. A submit that fails is retried with the same ID,
// as the contract says. In the end every job is applied exactly once, in
// each producer's order.
func TestSIGKILLRestart(t *testing.T) {
	store := newStore(t)
	d := startDaemon(t, store)

	const producers, jobs = 4, 40
	var stop atomic.Bool
	var wg sync.WaitGroup
	failures := make(chan string, producers)
	for p := range producers {
		wg.Go(func() {
			for i := range jobs {
				id := fmt.Sprintf("p%d-%d", p, i)
				for try := 0; ; try++ {
					r := scribe(t, "", "submit", "--store", store, "--route", "require", "--id", id,
						"append", "log.txt", fmt.Sprintf("%d %d\n", p, i))
					if r.code == 0 {
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
		t.Logf("round %d: killed the daemon", round+1)
		d = startDaemon(t, store)
	}
	wg.Wait()
	stop.Store(true)
	close(failures)
	for f := range failures {
		t.Error(f)
	}

	// Everything accepted is applied once the daemon drains the queue.
	var lines []string
	require.Eventually(t, func() bool {
		lines = strings.Split(strings.TrimSuffix(readFile(t, filepath.Join(store, "log.txt")), "\n"), "\n")
		return len(lines) >= producers*jobs
	}, 60*time.Second, 50*time.Millisecond, "applied %d of %d", len(lines), producers*jobs)
	assert.Len(t, lines, producers*jobs, "no job applied twice")
	next := make([]int, producers)
	for _, l := range lines {
		var p, i int
		_, err := fmt.Sscanf(l, "%d %d", &p, &i)
		require.NoError(t, err, "torn line %q", l)
		assert.Equal(t, next[p], i, "producer %d: line %q out of order or doubled", p, l)
		next[p] = i + 1
	}
	for p := range producers {
		assert.Equal(t, jobs, next[p], "producer %d's jobs all applied", p)
	}
	st := scribe(t, "", "status", "--store", store, "--json", fmt.Sprintf("p0-%d", jobs-1))
	assert.Equal(t, 0, st.code, st.stderr)
	assert.Contains(t, st.stdout, `"status": "applied"`)
}

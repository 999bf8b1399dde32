package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/queue"
)

// The producers of `scribe bench`: through a scribe client, or writing
// directly under flock; and the check of what they left in the files.

// Producer is one producer of a contender: it does the jobs of a
// workload one after another, as a caller of that contender would.
type Producer interface {
	// Do does job seq: the retries it made, and whether the job counts
	// (false with a nil error: given up, lost).
	Do(ctx context.Context, seq int) (retries int, ok bool, err error)
	// stats are the syncs made (flock) and the last job's ID (scribe).
	stats() (syncs int, lastID string)
	// Close lets go of what the producer holds: its client or its files.
	Close() error
}

// NewProducer sets up producer p of contender c on workload w, in dir: a
// store a daemon serves, for a scribe contender (its client takes the
// require route), or a folder, for flock (its lock file is dir/lock).
// Producers of one run are numbered from 0; each writes lines or files
// of its own that the bench can tell apart.
func NewProducer(ctx context.Context, c Contender, w Workload, dir string, p int) (Producer, error) {
	if !c.Scribe {
		return openFlockWorker(dir, w, p, c.FailFast)
	}
	cl, err := client.Open(ctx, dir, client.WithRoute(client.RouteRequire))
	if err != nil {
		return nil, fmt.Errorf("open client: %w", err)
	}
	return &scribeWorker{c: cl, submit: c.Submit, w: w, p: p}, nil
}

// benchJob is job seq of producer p: the op, the file and the data. Every
// payload starts with "producer P job SEQ", which verifyRun reads back.
func benchJob(w Workload, p, seq int) (queue.OpKind, string, []byte) {
	head := fmt.Sprintf("producer %04d job %09d ", p, seq)
	switch w.Name {
	case "append":
		return queue.OpAppend, "log.txt", []byte(head + strings.Repeat("x", max(w.Bytes-len(head)-1, 0)) + "\n")
	case "merge":
		pre := fmt.Sprintf(`{"p%d":{"seq":%d,"pad":"`, p, seq)
		return queue.OpMerge, "state.json", []byte(pre + strings.Repeat("x", max(w.Bytes-len(pre)-3, 0)) + `"}}`)
	}
	// bytes.Repeat fills at memmove speed: a loop of single bytes was a
	// tenth of a 1 MiB put producer's CPU, for scribe and flock alike.
	data := bytes.Repeat([]byte{'x'}, max(w.Bytes, len(head)+1))
	copy(data, head)
	data[len(data)-1] = '\n'
	return queue.OpPut, fmt.Sprintf("put-p%d.dat", p), data
}

// parseHead reads "producer P job SEQ" at the start of b.
func parseHead(b []byte) (p, seq int, ok bool) {
	f := strings.Fields(string(b[:min(len(b), 64)]))
	if len(f) < 4 || f[0] != "producer" || f[2] != "job" {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(f[1])
	seq, err2 := strconv.Atoi(f[3])
	return p, seq, err1 == nil && err2 == nil
}

// scribeWorker produces through its own client.
type scribeWorker struct {
	c      *client.Client
	submit bool
	w      Workload
	p      int
	lastID string
}

func (s *scribeWorker) Do(ctx context.Context, seq int) (int, bool, error) {
	kind, path, data := benchJob(s.w, s.p, seq)
	job := &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: kind, Path: path, Data: data}}}
	if !s.submit {
		out, err := s.c.Apply(ctx, job)
		if err != nil {
			return 0, false, err
		}
		if !out.Applied() {
			return 0, false, fmt.Errorf("job %s not applied: %w", out.ID, out.Err())
		}
		s.lastID = out.ID
		return 0, true, nil
	}
	// A full queue is back-pressure: a caller tries again a moment later.
	for retries := 0; ; retries++ {
		err := s.c.Submit(ctx, job)
		if err == nil {
			s.lastID = job.ID
			return retries, true, nil
		}
		if !errors.Is(err, client.ErrQueueFull) {
			return retries, false, err
		}
		select {
		case <-ctx.Done():
			return retries, false, err
		case <-time.After(time.Millisecond << min(retries, 6)):
		}
	}
}

func (s *scribeWorker) stats() (int, string) { return 0, s.lastID }
func (s *scribeWorker) Close() error         { return s.c.Close() }

// flockWorker writes directly under a flock of the folder's lock file,
// through its own open file descriptions, as a separate process would.
type flockWorker struct {
	dir      string
	w        Workload
	p        int
	failFast bool
	lock     *os.File
	folder   *os.File // fsynced after a rename
	log      *os.File // append: the file, O_APPEND
	syncs    int
}

func openFlockWorker(dir string, w Workload, p int, failFast bool) (_ *flockWorker, err error) {
	f := &flockWorker{dir: dir, w: w, p: p, failFast: failFast}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	if f.lock, err = os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return nil, err
	}
	if f.folder, err = os.Open(dir); err != nil {
		return nil, err
	}
	if w.Name == "append" {
		if f.log, err = os.OpenFile(filepath.Join(dir, "log.txt"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (f *flockWorker) Do(ctx context.Context, seq int) (int, bool, error) {
	retries, ok, err := f.take(ctx)
	if !ok || err != nil {
		return retries, false, err
	}
	err = f.write(seq)
	if uerr := flockEINTR(f.lock, unix.LOCK_UN); err == nil {
		err = uerr
	}
	return retries, err == nil, err
}

// take takes the lock: blocking, or fail-fast with backoff, giving up
// (ok false, nil error) after FailFastRetries retries.
func (f *flockWorker) take(ctx context.Context) (retries int, ok bool, err error) {
	if !f.failFast {
		return 0, true, flockEINTR(f.lock, unix.LOCK_EX)
	}
	pause := FailFastFirst
	for {
		err := flockEINTR(f.lock, unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return retries, true, nil
		case !errors.Is(err, unix.EWOULDBLOCK):
			return retries, false, err
		case retries == FailFastRetries:
			return retries, false, nil
		}
		select {
		case <-ctx.Done():
			return retries, false, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, FailFastMax)
		retries++
	}
}

// write does job seq with the lock held: append and fsync, or a
// read-merge-replace, or a replace.
func (f *flockWorker) write(seq int) error {
	_, path, data := benchJob(f.w, f.p, seq)
	switch f.w.Name {
	case "append":
		if _, err := f.log.Write(data); err != nil {
			return err
		}
		f.syncs++
		return f.log.Sync()
	case "merge":
		doc := map[string]json.RawMessage{}
		b, err := os.ReadFile(filepath.Join(f.dir, path))
		switch {
		case err == nil:
			if err := json.Unmarshal(b, &doc); err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		var patch map[string]json.RawMessage
		if err := json.Unmarshal(data, &patch); err != nil {
			return err
		}
		// The patch replaces whole members (every key of its object is
		// set): RFC 7386 comes down to copying them.
		maps.Copy(doc, patch)
		if data, err = json.Marshal(doc); err != nil {
			return err
		}
	}
	return f.replace(path, data)
}

// replace replaces a file atomically and durably: a temporary file,
// fsync, rename, fsync of the folder.
func (f *flockWorker) replace(name string, data []byte) error {
	tmp := filepath.Join(f.dir, fmt.Sprintf(".%s.%d.tmp", name, f.p))
	t, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = t.Write(data)
	if err == nil {
		f.syncs++
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(f.dir, name))
	}
	if err == nil {
		f.syncs++
		err = f.folder.Sync()
	}
	return err
}

func (f *flockWorker) stats() (int, string) { return f.syncs, "" }

func (f *flockWorker) Close() error {
	var errs []error
	for _, file := range []*os.File{f.lock, f.folder, f.log} {
		if file != nil {
			errs = append(errs, file.Close())
		}
	}
	return errors.Join(errs...)
}

func flockEINTR(f *os.File, how int) error {
	for {
		if err := unix.Flock(int(f.Fd()), how); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// verifyRun reads the store's files back: writes counted but missing
// (lost), or present more than once (doubled). Appends are checked line by
// line; a merged or replaced file shows only each producer's last write,
// which must be the last one counted.
func verifyRun(w Workload, dir string, results []producerResult) (lost, doubled int, err error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return b, err
	}
	switch w.Name {
	case "append":
		data, err := read("log.txt")
		if err != nil {
			return 0, 0, err
		}
		seen := map[[2]int]int{}
		for line := range bytes.Lines(data) {
			p, seq, ok := parseHead(line)
			if !ok || len(line) != w.Bytes {
				return 0, 0, fmt.Errorf("log.txt has a damaged line: %.40q", line)
			}
			seen[[2]int{p, seq}]++
		}
		for p, r := range results {
			gaveUp := map[int]bool{}
			for _, seq := range r.GaveUp {
				gaveUp[seq] = true
			}
			for seq := 1; seq <= r.Seqs; seq++ {
				want := 1
				if gaveUp[seq] {
					want = 0
				}
				switch n := seen[[2]int{p, seq}]; {
				case n < want:
					lost++
				case n > want:
					doubled += n - want
				}
			}
		}
	case "merge":
		data, err := read("state.json")
		if err != nil {
			return 0, 0, err
		}
		doc := map[string]struct {
			Seq int `json:"seq"`
		}{}
		if data != nil {
			if err := json.Unmarshal(data, &doc); err != nil {
				return 0, 0, fmt.Errorf("state.json is damaged: %w", err)
			}
		}
		for p, r := range results {
			if r.LastSeq > 0 && doc[fmt.Sprintf("p%d", p)].Seq != r.LastSeq {
				lost++
			}
		}
	default:
		for p, r := range results {
			if r.LastSeq == 0 {
				continue
			}
			data, err := read(fmt.Sprintf("put-p%d.dat", p))
			if err != nil {
				return 0, 0, err
			}
			if fp, seq, ok := parseHead(data); !ok || fp != p || seq != r.LastSeq || len(data) != len(benchPayload(w, p, seq)) {
				lost++
			}
		}
	}
	return lost, doubled, nil
}

func benchPayload(w Workload, p, seq int) []byte {
	_, _, data := benchJob(w, p, seq)
	return data
}

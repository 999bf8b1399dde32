package writer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/writer"
	"github.com/scribehq/scribe/writer/journal"
	"github.com/scribehq/scribe/writer/lock"
)

// acquire takes a hold on store in this process and returns its release.
type acquire func(tb testing.TB, store string) (release func() error)

func viaTryLock(tb testing.TB, store string) func() error {
	tb.Helper()
	h, err := lock.Acquire(context.Background(), store, lock.Options{})
	require.NoError(tb, err)
	return h.Unlock
}

func viaSession(tb testing.TB, store string) func() error {
	tb.Helper()
	s, err := writer.Open(context.Background(), store, writer.Options{})
	require.NoError(tb, err)
	return s.Close
}

// doneCtx is a context that has already ended: a lock.Acquire or an
// Open with a wait that succeeds with it did not wait.
func doneCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func viaLock(tb testing.TB, store string) func() error {
	tb.Helper()
	h, err := lock.Acquire(doneCtx(), store, lock.Options{Wait: time.Minute})
	require.NoError(tb, err)
	return h.Unlock
}

func viaSessionWait(tb testing.TB, store string) func() error {
	tb.Helper()
	s, err := writer.Open(doneCtx(), store, writer.Options{Wait: time.Minute})
	require.NoError(tb, err)
	return s.Close
}

// viaSymlink takes the lock through a symlink to the store and an
// explicit lock path spelled through that link.
func viaSymlink(tb testing.TB, store string) func() error {
	tb.Helper()
	link := filepath.Join(tb.TempDir(), "link")
	require.NoError(tb, os.Symlink(store, link))
	h, err := lock.Acquire(context.Background(), link, lock.Options{LockPath: filepath.Join(link, queue.MetaDir, "lock")})
	require.NoError(tb, err)
	return h.Unlock
}

// Nested holds in one process succeed at once, and another process is
// refused for as long as any of them remains, whatever the release order.
func TestReentrant(t *testing.T) {
	tests := []struct {
		name  string
		steps []acquire
	}{
		{"TryLock twice", []acquire{viaTryLock, viaTryLock}},
		{"session inside TryLock", []acquire{viaTryLock, viaSession}},
		{"TryLock inside a session", []acquire{viaSession, viaTryLock}},
		{"two sessions", []acquire{viaSession, viaSession}},
		{"Acquire and Open with a wait inside a hold", []acquire{viaTryLock, viaLock, viaSessionWait}},
		{"through a symlinked store", []acquire{viaSession, viaSymlink}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			path := lock.DefaultPath(store)
			var releases []func() error
			for _, step := range tt.steps {
				releases = append(releases, step(t, store))
			}
			t.Cleanup(func() {
				for _, release := range releases {
					_ = release()
				}
			})
			ino := inode(t, path)
			// Outermost first: nested holds are counted, not stacked.
			for i, release := range releases {
				other := assertChildLocked(t, store, lock.Options{})
				if assert.NotNil(t, other, "hold %d of %d remains", len(releases)-i, len(releases)) {
					assert.Equal(t, os.Getpid(), other.PID)
				}
				require.NoError(t, release())
			}
			assertChildGets(t, store, lock.Options{})
			assertReleased(t, path)
			assert.Equal(t, ino, inode(t, path))
		})
	}
}

// Goroutines of one process taking the lock (TryLock or a Session)
// together all get it, sharing one flock and, for sessions, one epoch.
func TestReentrantGoroutines(t *testing.T) {
	const n = 8
	store := newStore(t)
	start := make(chan struct{})
	type held struct {
		release func() error
		epoch   uint64 // a session's
		err     error
	}
	got := make(chan held, n)
	for i := range n {
		go func() {
			<-start
			if i%2 == 0 {
				h, err := lock.Acquire(context.Background(), store, lock.Options{Command: fmt.Sprint("goroutine ", i)})
				if err != nil {
					got <- held{err: err}
					return
				}
				got <- held{release: h.Unlock}
				return
			}
			s, err := writer.Open(context.Background(), store, writer.Options{})
			if err != nil {
				got <- held{err: err}
				return
			}
			got <- held{release: s.Close, epoch: s.Epoch()}
		}()
	}
	close(start)
	var releases []func() error
	epochs := map[uint64]bool{}
	for range n {
		h := await(t, got)
		require.NoError(t, h.err, "no goroutine is refused by its own process")
		releases = append(releases, h.release)
		if h.epoch != 0 {
			epochs[h.epoch] = true
		}
	}
	t.Cleanup(func() {
		for _, release := range releases {
			_ = release()
		}
	})
	assert.Equal(t, map[uint64]bool{1: true}, epochs, "one acquisition, one epoch")
	assert.NotNil(t, assertChildLocked(t, store, lock.Options{}))

	// Release all but one, concurrently.
	var wg sync.WaitGroup
	for _, release := range releases[1:] {
		wg.Go(func() { assert.NoError(t, release()) })
	}
	wg.Wait()
	assert.NotNil(t, assertChildLocked(t, store, lock.Options{}), "one hold remains")
	require.NoError(t, releases[0]())
	assertChildGets(t, store, lock.Options{})
}

// Releasing a hold twice is a no-op: it must not release a hold that
// another part of the process still relies on.
func TestReleaseTwice(t *testing.T) {
	tests := []struct {
		name  string
		inner acquire
	}{
		{"Hold.Unlock", viaTryLock},
		{"Session.Close", viaSession},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			outer := tryLock(t, store, lock.Options{})
			release := tt.inner(t, store)
			require.NoError(t, release())
			assert.NoError(t, release(), "the second release is a no-op")
			assert.NotNil(t, assertChildLocked(t, store, lock.Options{}), "the outer hold still holds")

			again := viaTryLock(t, store)
			require.NoError(t, outer.Unlock())
			assert.NoError(t, outer.Unlock())
			assert.NotNil(t, assertChildLocked(t, store, lock.Options{}), "the latest hold still holds")
			require.NoError(t, again())
			assertChildGets(t, store, lock.Options{})
		})
	}
}

// The epoch is raised once per real acquisition of the lock, not per
// nested session.
func TestEpochOncePerAcquisition(t *testing.T) {
	store := newStore(t)
	journalEpoch := func() uint64 {
		t.Helper()
		ro, err := journal.OpenReadOnly(journal.Path(store), time.Second)
		require.NoError(t, err)
		defer ro.Close()
		epoch, _, err := ro.Meta()
		require.NoError(t, err)
		return epoch
	}

	for acquisition := uint64(1); acquisition <= 2; acquisition++ {
		h, err := lock.Acquire(context.Background(), store, lock.Options{})
		require.NoError(t, err)
		s1, err := writer.Open(context.Background(), store, writer.Options{})
		require.NoError(t, err)
		assert.Equal(t, acquisition, s1.Epoch())
		s2, err := writer.Open(context.Background(), store, writer.Options{Wait: time.Minute})
		require.NoError(t, err)
		assert.Equal(t, acquisition, s2.Epoch(), "a nested session shares the epoch")
		assert.Same(t, s1.Journal(), s2.Journal(), "and the journal")
		require.NoError(t, s1.Close())
		require.NoError(t, s2.Close())

		// The sessions are gone, the hold is not: still the same acquisition.
		assert.Equal(t, acquisition, journalEpoch())
		s3, err := writer.Open(context.Background(), store, writer.Options{})
		require.NoError(t, err)
		assert.Equal(t, acquisition, s3.Epoch())
		id, err := lock.ReadHolder(h.Path())
		require.NoError(t, err)
		assert.Equal(t, acquisition, id.Epoch)
		require.NoError(t, s3.Close())
		require.NoError(t, h.Unlock())
		assert.Equal(t, acquisition, journalEpoch())
	}
}

// Sessions under one hold share one journal and one store, and their
// batches take turns: concurrent appends lose nothing.
func TestNestedSessionsTakeTurns(t *testing.T) {
	const perSession = 100
	store := newStore(t)
	sessions := []*writer.Session{
		openSession(t, store, writer.Options{}),
		openSession(t, store, writer.Options{}),
	}
	var wg sync.WaitGroup
	var want []string
	for i, s := range sessions {
		for n := range perSession {
			want = append(want, fmt.Sprintf("s%d-%03d", i, n))
		}
		wg.Go(func() {
			for n := range perSession {
				line := fmt.Sprintf("s%d-%03d", i, n)
				res, err := s.Apply([]writer.Entry{{Job: newJob(t, store, line, appendOp("log", line+"\n"))}})
				if assert.NoError(t, err) {
					assertOutcome(t, res[0].Outcome, "")
				}
			}
		})
	}
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(readFiles(t, store)["log"], "\n"), "\n")
	sort.Strings(got)
	assert.Equal(t, want, got, "every append, once")
	for _, id := range want {
		o, err := sessions[0].Journal().Outcome(id)
		require.NoError(t, err)
		if assert.NotNil(t, o, id) {
			assert.Equal(t, sessions[0].Epoch(), o.Epoch)
		}
	}
}

// Two stores that share a lock file in one process (a daemon of several
// stores, a Go program) take it in turn: a session of one is not nested
// in the other's hold, whose journal, tree and epoch are the other
// store's. Each store's jobs land in that store.
func TestStoresSharingALockFileTakeTurns(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "shared.lock")
	notes, wiki := newStore(t), newStore(t)
	o := writer.Options{LockPath: shared}
	sn := openSession(t, notes, o)
	_, err := writer.Open(context.Background(), wiki, o)
	require.ErrorIs(t, err, lock.ErrLocked, "the other store's hold is another holder")
	res, err := sn.Apply([]writer.Entry{{Job: newJob(t, notes, "n1", appendOp("log", "notes\n"))}})
	require.NoError(t, err)
	assertOutcome(t, res[0].Outcome, "")
	require.NoError(t, sn.Close())

	sw := openSession(t, wiki, o)
	res, err = sw.Apply([]writer.Entry{{Job: newJob(t, wiki, "w1", appendOp("log", "wiki\n"))}})
	require.NoError(t, err)
	assertOutcome(t, res[0].Outcome, "")
	assert.Equal(t, uint64(1), sw.Epoch(), "the wiki journal's own epoch")
	o1, err := sw.Journal().Outcome("n1")
	require.NoError(t, err)
	assert.Nil(t, o1, "the wiki journal has only the wiki's jobs")
	require.NoError(t, sw.Close())
	assert.Equal(t, map[string]string{"log": "notes\n"}, readFiles(t, notes))
	assert.Equal(t, map[string]string{"log": "wiki\n"}, readFiles(t, wiki))
}

// A child given the hold's descriptor and ChildEnv joins the hold: it
// gets the lock at once, works under the parent's epoch, and its release
// leaves the parent's hold (and the lock file) as they were.
func TestInheritedHold(t *testing.T) {
	store := newStore(t)
	path := lock.DefaultPath(store)
	h := tryLock(t, store, lock.Options{Command: "scribe lock"})
	// As `scribe lock` does: the epoch of this acquisition, then the
	// journal closed for the child.
	s, err := writer.Open(context.Background(), store, writer.Options{})
	require.NoError(t, err)
	epoch := s.Epoch()
	require.NoError(t, s.Close())
	ino := inode(t, path)
	identity, err := os.ReadFile(path)
	require.NoError(t, err)
	// What is handed down is what the lock file says.
	id, err := lock.ReadHolder(path)
	require.NoError(t, err)
	env := h.ChildEnv(3)
	assert.Contains(t, env, lock.EnvEpoch+"="+strconv.FormatUint(id.Epoch, 10))
	assert.Contains(t, env, lock.EnvLockToken+"="+id.Token)
	assert.Equal(t, epoch, id.Epoch)

	child := holdInChild(t, store, lock.Options{},
		withFiles(h.File()), withEnv(h.ChildEnv(3)...), withSession(),
		withEnv(envAppend+"=log"),
		// Lock/unlock cycles before: a child may take and release the
		// inherited hold any number of times.
		withEnv(envCycles+"=3"))
	assert.Equal(t, uintptr(3), child.Report.FD, "the child joined the inherited descriptor")
	assert.True(t, child.Report.CloseOnExec, "nothing the child runs inherits it further unasked")
	assert.Equal(t, epoch, child.Report.Epoch, "the parent's epoch")
	assert.Equal(t, epoch, child.Report.AppliedEpoch)

	other := assertChildLocked(t, store, lock.Options{})
	if assert.NotNil(t, other) {
		assert.Equal(t, os.Getpid(), other.PID, "the parent is the holder")
	}
	child.Stop(t)
	assert.NotNil(t, assertChildLocked(t, store, lock.Options{}), "the child's release is not the parent's")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(identity), string(after), "the parent's identity is untouched")
	assert.Equal(t, map[string]string{"log": "child\n"}, readFiles(t, store))

	require.NoError(t, h.Unlock())
	assertChildGets(t, store, lock.Options{})
	assert.Equal(t, ino, inode(t, path))
	ro, err := journal.OpenReadOnly(journal.Path(store), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Close() })
	last, _, err := ro.Meta()
	require.NoError(t, err)
	assert.Equal(t, epoch, last, "the child raised no epoch of its own")
}

// A daemon never joins a hold handed down to it: it would outlive the
// hold and apply queued jobs under it. Given the descriptor and ChildEnv
// of a hold taken with Take, a child in daemon mode contends like anyone
// (and is refused, naming the parent), while a direct writer joins.
func TestDaemonNeverJoinsInheritedHold(t *testing.T) {
	store := newStore(t)
	h, err := writer.Take(context.Background(), store, writer.Options{Command: "scribe lock"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Unlock() })
	inherit := []helperOpt{withFiles(h.File()), withEnv(h.ChildEnv(3)...), withSession()}

	other := assertChildLocked(t, store, lock.Options{Mode: queue.ModeDaemon, Command: "scribe serve"}, inherit...)
	if assert.NotNil(t, other, "refused as a contender, with the holder named") {
		assert.Equal(t, os.Getpid(), other.PID)
		assert.Equal(t, "scribe lock", other.Command)
	}
	r := assertChildGets(t, store, lock.Options{Mode: queue.ModeDirect}, inherit...)
	assert.Equal(t, uintptr(3), r.FD, "a direct writer joins the same hold")
	assert.Equal(t, h.Epoch(), r.Epoch)
}

// A child joins a hold only through the right descriptor for the right
// lock file: anything else is an ordinary contender.
func TestInheritedHoldRefused(t *testing.T) {
	tests := []struct {
		name string
		// child returns the child's options, given the parent's hold.
		child func(tb testing.TB, h *lock.Hold) []helperOpt
	}{
		{"wrong lock ID", func(tb testing.TB, h *lock.Hold) []helperOpt {
			return []helperOpt{withFiles(h.File()), withEnv(h.ChildEnv(3)...), withEnv(lock.EnvLockID + "=1:2")}
		}},
		{"another descriptor on the lock file", func(tb testing.TB, h *lock.Hold) []helperOpt {
			f, err := os.Open(h.Path())
			require.NoError(tb, err)
			tb.Cleanup(func() { _ = f.Close() })
			return []helperOpt{withFiles(f), withEnv(h.ChildEnv(3)...)}
		}},
		{"descriptor of another file", func(tb testing.TB, h *lock.Hold) []helperOpt {
			f, err := os.Open(journal.Path(filepath.Dir(filepath.Dir(h.Path()))))
			require.NoError(tb, err)
			tb.Cleanup(func() { _ = f.Close() })
			return []helperOpt{withFiles(f), withEnv(h.ChildEnv(3)...)}
		}},
		{"no descriptor", func(tb testing.TB, h *lock.Hold) []helperOpt {
			return []helperOpt{withEnv(h.ChildEnv(3)...)}
		}},
		{"descriptor below 3", func(tb testing.TB, h *lock.Hold) []helperOpt {
			return []helperOpt{withFiles(h.File()), withEnv(h.ChildEnv(3)...), withEnv(lock.EnvLockFD + "=0")}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			require.NoError(t, openSession(t, store, writer.Options{}).Close()) // a journal for a case to open
			h := tryLock(t, store, lock.Options{Command: "parent"})
			before, err := os.ReadFile(h.Path())
			require.NoError(t, err)

			other := assertChildLocked(t, store, lock.Options{}, tt.child(t, h)...)
			if assert.NotNil(t, other) {
				assert.Equal(t, os.Getpid(), other.PID)
				assert.Equal(t, "parent", other.Command)
			}
			after, err := os.ReadFile(h.Path())
			require.NoError(t, err)
			assert.Equal(t, string(before), string(after))
			assert.False(t, lockFree(t, h.Path()), "the parent still holds")
		})
	}
}

// A child that inherited a hold on one store locks another store on its
// own, without touching the inherited descriptor.
func TestInheritedHoldOtherStore(t *testing.T) {
	store, other := newStore(t), newStore(t)
	h := tryLock(t, store, lock.Options{})
	r := assertChildGets(t, other, lock.Options{}, withFiles(h.File()), withEnv(h.ChildEnv(3)...))
	assert.NotEqual(t, uintptr(3), r.FD)
	assert.False(t, lockFree(t, h.Path()), "the inherited hold is the parent's still")
}

// WithLock releases the lock on every way out of fn.
func TestWithLockReleases(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name      string
		nested    bool // inside a hold of this process's, which must remain
		fn        func() error
		wantErr   error
		wantPanic any
	}{
		{name: "returns", fn: func() error { return nil }},
		{name: "returns an error", fn: func() error { return errBoom }, wantErr: errBoom},
		{name: "panics", fn: func() error { panic("boom") }, wantPanic: "boom"},
		{name: "panics inside a hold", nested: true, fn: func() error { panic(errBoom) }, wantPanic: errBoom},
		{name: "returns an error inside a hold", nested: true, fn: func() error { return errBoom }, wantErr: errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			var outer *lock.Hold
			if tt.nested {
				outer = tryLock(t, store, lock.Options{})
			}
			ran := false
			var err error
			panicked := func() (p any) {
				defer func() { p = recover() }()
				err = writer.WithLock(store, lock.Options{Command: "with lock"}, func(h *lock.Hold) error {
					ran = true
					assert.False(t, lockFree(t, h.Path()), "held inside fn")
					return tt.fn()
				})
				return nil
			}()
			assert.True(t, ran)
			assert.Equal(t, tt.wantPanic, panicked)
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr)
			} else {
				assert.NoError(t, err)
			}
			if outer != nil {
				assert.NotNil(t, assertChildLocked(t, store, lock.Options{}), "the outer hold remains")
				require.NoError(t, outer.Unlock())
			}
			assertChildGets(t, store, lock.Options{})
		})
	}
}

func TestWithLockBusy(t *testing.T) {
	store := newStore(t)
	holdInChild(t, store, lock.Options{Command: "busy"})
	err := writer.WithLock(store, lock.Options{}, func(*lock.Hold) error {
		assert.Fail(t, "fn ran without the lock")
		return nil
	})
	assert.ErrorIs(t, err, lock.ErrLocked)
}

// rewriteIdentity changes fields of the identity in a lock file, keeping
// the others (whatever fields the identity has).
func rewriteIdentity(tb testing.TB, path string, set map[string]any) {
	tb.Helper()
	b, err := os.ReadFile(path)
	require.NoError(tb, err)
	var id map[string]any
	require.NoError(tb, json.Unmarshal(b, &id))
	maps.Copy(id, set)
	b, err = json.Marshal(id)
	require.NoError(tb, err)
	require.NoError(tb, os.WriteFile(path, b, 0o600))
}

// identityField is one field of the identity in a lock file, nil if the
// file holds no identity or not that field.
func identityField(tb testing.TB, path, field string) any {
	tb.Helper()
	b, err := os.ReadFile(path)
	require.NoError(tb, err)
	var id map[string]any
	if json.Unmarshal(b, &id) != nil {
		return nil
	}
	return id[field]
}

// dupFile is another descriptor on f's open file description, as a
// background child of a `scribe lock` keeps it: it outlives f.
func dupFile(tb testing.TB, f *os.File) *os.File {
	tb.Helper()
	fd, err := unix.Dup(int(f.Fd()))
	require.NoError(tb, err)
	d := os.NewFile(uintptr(fd), f.Name())
	tb.Cleanup(func() { _ = d.Close() })
	return d
}

// A child handed a hold that has since ended — released, or its holder
// dead while the descriptor lives on — never joins it, and never takes
// the lock through the inherited descriptor: it is an ordinary contender.
func TestInheritedHoldEnded(t *testing.T) {
	const deadPID = 1<<22 + 1 // beyond any pid_max
	t.Run("released", func(t *testing.T) {
		store := newStore(t)
		path := lock.DefaultPath(store)
		h := tryLock(t, store, lock.Options{Command: "parent"})
		kept := dupFile(t, h.File())
		env := h.ChildEnv(3)
		require.NoError(t, h.Unlock())

		child := holdInChild(t, store, lock.Options{Command: "child"}, withFiles(kept), withEnv(env...))
		id, err := lock.ReadHolder(path)
		require.NoError(t, err, "the child holds with an identity of its own")
		assert.Equal(t, child.Report.PID, id.PID)
		assert.Equal(t, "child", id.Command)
		assert.NotNil(t, assertChildLocked(t, store, lock.Options{}), "its hold excludes others")
		child.Stop(t)
		assertReleased(t, path) // though the inherited description is still open here
	})
	tests := []struct {
		name string
		// end makes the hold, which this process keeps, look ended to the
		// child: it changes the identity in path, or returns environment
		// that overrides ChildEnv's.
		end func(tb testing.TB, path string) []string
	}{
		{"holder dead", func(tb testing.TB, path string) []string {
			rewriteIdentity(tb, path, map[string]any{"pid": deadPID})
			return nil
		}},
		{"holder's pid reused", func(tb testing.TB, path string) []string {
			rewriteIdentity(tb, path, map[string]any{"pid": os.Getppid()})
			return nil
		}},
		{"no token: a parent that cannot be checked", func(tb testing.TB, path string) []string {
			return []string{lock.EnvLockToken + "="}
		}},
		{"another hold's token", func(tb testing.TB, path string) []string {
			return []string{lock.EnvLockToken + "=0123456789abcdef"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			path := lock.DefaultPath(store)
			h := tryLock(t, store, lock.Options{Command: "parent"})
			env := append(h.ChildEnv(3), tt.end(t, path)...)
			before, err := os.ReadFile(path)
			require.NoError(t, err)

			r := tryInChild(t, store, lock.Options{}, withFiles(h.File()), withEnv(env...))
			assert.False(t, r.OK, "the child joined a hold that ended")
			assert.True(t, r.Locked, "the child is an ordinary contender, refused: %s", r.Err)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(before), string(after))
			assert.False(t, lockFree(t, path), "the description still holds the flock")
		})
	}
}

// Releasing a hold handed to children waits until those that joined it
// have let go; meanwhile no other child joins and the store stays held.
func TestUnlockWaitsForJoinedChild(t *testing.T) {
	store := newStore(t)
	path := lock.DefaultPath(store)
	h := tryLock(t, store, lock.Options{Command: "parent"})
	f, env := h.File(), h.ChildEnv(3)
	late := dupFile(t, f)
	child := holdInChild(t, store, lock.Options{}, withFiles(f), withEnv(env...))
	require.Equal(t, uintptr(3), child.Report.FD, "the child joined")

	released := make(chan error, 1)
	go func() { released <- h.Unlock() }()
	require.Eventually(t, func() bool { return identityField(t, path, "token") == nil }, helperTimeout, time.Millisecond,
		"the releasing parent withdraws its token")
	other := assertChildLocked(t, store, lock.Options{}, withFiles(late), withEnv(env...))
	if assert.NotNil(t, other, "no child joins a hold being released") {
		assert.Equal(t, "parent", other.Command, "the parent still holds")
	}
	assertWaiting(t, released)
	assert.False(t, lockFree(t, path))

	child.Stop(t)
	require.NoError(t, await(t, released))
	assertReleased(t, path)
}

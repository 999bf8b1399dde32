package embednats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/queue"
)

// ErrFormerQueue means jobs of a store wait in a queue of its former path
// (the store was moved or renamed, which changed its ID) that a server of
// several stores cannot drain: only a daemon of the store alone applies
// them (daemon.WriterConfig.OwnServer). The error names the folder.
var ErrFormerQueue = errors.New("jobs wait under a former path of the store")

// QueueSource is a queue folder that may hold jobs of a store: its own
// (queue.Layout.Queue), or a shared queue folder (discovery.QueueDir).
type QueueSource struct {
	// Dir is the folder the queue's server keeps its data in:
	// queue.Layout.Queue, or discovery.QueueDir.JetStream.
	Dir string
	// StoreID is the store's ID in it: a moved store's is its former one.
	StoreID string
	// Shared says that Dir is a shared queue folder, where the store's
	// queue is in its account (AccountName). In a store's own folder the
	// queues are in the global account, and every scribe stream there is
	// the store's, those of other IDs under former paths.
	Shared bool
}

// account is the source's account of the store's queue; "" for the
// global one.
func (src QueueSource) account() string {
	if src.Shared {
		return AccountName(src.StoreID)
	}
	return ""
}

// streamsDir is where nats-server keeps the source's streams, a folder
// each, named after the stream.
func (src QueueSource) streamsDir() string {
	acc := src.account()
	if acc == "" {
		acc = server.DEFAULT_GLOBAL_ACCOUNT
	}
	return filepath.Join(src.Dir, "jetstream", acc, "streams")
}

// streams are the scribe streams found in the source's folder: the
// store's own, and in its own folder those of its former paths.
func (src QueueSource) streams() ([]string, error) {
	entries, err := os.ReadDir(src.streamsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", src.streamsDir(), err)
	}
	var names []string
	for _, e := range entries {
		id, ok := queue.StreamStoreID(e.Name())
		if ok && e.IsDir() && (id == src.StoreID || !src.Shared) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// HasQueue reports whether the source's folder holds a queue of the
// store (a stream, empty or not): only then does TakeOver need the folder.
// It looks at the folder's entries only.
func (src QueueSource) HasQueue() (bool, error) {
	names, err := src.streams()
	return len(names) > 0, err
}

// TakeOverConfig says what TakeOver and TakeOverInto move where.
type TakeOverConfig struct {
	// StoreID is the store's current ID.
	StoreID string
	// From is the queue folder that may hold the store's jobs. The caller
	// holds what guards it: the store's daemon lock for its own folder,
	// the discovery.QueueDir of a shared one.
	From QueueSource
	// Limits are the limits of the store's queue, which is created with
	// them if it is missing.
	Limits queue.Limits
	// Moved, if set, is called once every job is copied and before any is
	// deleted from From: the caller records there that the jobs are here
	// now.
	Moved func() error
	// DrainFormer says that the store's writer drains the queues of the
	// store's former paths (daemon.WriterConfig.OwnServer): they are
	// copied under their own names. Without it, a former path's queue that
	// holds jobs stops the take-over with ErrFormerQueue. TakeOver sets
	// it for a server of one store.
	DrainFormer bool
	// Logger receives what was moved; nil discards it (TakeOver: the
	// server's).
	Logger *slog.Logger
}

// TakeOver moves the jobs queued for a store in t.From into this server's
// queue for it, in their order, before the store's writer starts: a store
// whose daemon changed (a daemon of several stores, then of the store
// alone, or the reverse) keeps its queue in one place, and its older jobs
// apply first.
//
// Each job is copied (its Nats-Msg-Id kept) and stored here before the
// source's streams are deleted, and between the two TakeOver calls
// t.Moved, so that the caller records that the jobs are here now: a
// crash before leaves them in the source, where the record still points,
// and the next start copies them again; one after leaves them in both,
// the record pointing here. The journal answers a second copy as a
// duplicate. A store moved since (From.StoreID is another ID) keeps that
// stream name here, for its writer to drain (DrainFormer, for a server of
// one store); a server of several stores cannot, and returns
// ErrFormerQueue, as it does for the former paths' queues in a store's
// own folder that hold jobs: those stay where they are.
//
// It returns how many jobs it moved. A source folder without the store's
// queue costs nothing: no server is started for it, and Moved is not
// called.
func (s *Server) TakeOver(ctx context.Context, t TakeOverConfig) (int, error) {
	if has, err := t.From.HasQueue(); err != nil || !has {
		return 0, err
	}
	conn := s.StoreConn(t.StoreID)
	if conn == nil {
		return 0, fmt.Errorf("take over queue: store %s is not served", t.StoreID)
	}
	tjs, err := jetstream.New(conn)
	if err != nil {
		return 0, err
	}
	t.DrainFormer = !s.shared
	if t.Logger == nil {
		t.Logger = s.log
	}
	return TakeOverInto(ctx, tjs, t)
}

// TakeOverInto is TakeOver into any JetStream: a NATS server or cluster
// that the store's queue moves to (serve --nats-url). The store's stream
// there must exist, configured as the writer wants (queue.VerifyStream),
// or be free to create.
func TakeOverInto(ctx context.Context, tjs jetstream.JetStream, t TakeOverConfig) (int, error) {
	storeID, src, limits, moved, drainFormer, log := t.StoreID, t.From, t.Limits, t.Moved, t.DrainFormer, t.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names, err := src.streams()
	if err != nil || len(names) == 0 {
		return 0, err
	}
	sconn, closeSource, err := openSource(src, log)
	if err != nil {
		return 0, err
	}
	defer closeSource()
	sjs, err := jetstream.New(sconn)
	if err != nil {
		return 0, err
	}
	// Own stream first, then former paths' by when their oldest job came.
	type found struct {
		stream jetstream.Stream
		first  time.Time
	}
	var streams []found
	for _, name := range names {
		st, err := sjs.Stream(ctx, name)
		if err != nil {
			// The folder is there but the server did not load it: never
			// take that for "no jobs".
			return 0, fmt.Errorf("take over the queue in %s: load stream %s: %w", src.Dir, name, err)
		}
		info := st.CachedInfo()
		if id, _ := queue.StreamStoreID(info.Config.Name); id != storeID && !drainFormer && info.State.Msgs > 0 {
			return 0, fmt.Errorf("%w: %d jobs of the store queued under its former ID %s wait in %s; serve the store alone once to apply them (scribe serve --store DIR --exit-idle 1s), then add it again",
				ErrFormerQueue, info.State.Msgs, id, src.Dir)
		}
		streams = append(streams, found{st, info.State.FirstTime})
	}
	slices.SortStableFunc(streams, func(a, b found) int {
		if own := queue.StreamName(src.StoreID); a.stream.CachedInfo().Config.Name == own {
			return -1
		} else if b.stream.CachedInfo().Config.Name == own {
			return 1
		}
		return a.first.Compare(b.first)
	})
	n := 0
	for _, f := range streams {
		info := f.stream.CachedInfo()
		if info.State.Msgs == 0 {
			continue
		}
		id, _ := queue.StreamStoreID(info.Config.Name)
		k, err := copyStream(ctx, f.stream, tjs, id, limits)
		n += k
		if err != nil {
			return n, fmt.Errorf("take over the queue in %s: %w", src.Dir, err)
		}
		log.Debug("took over a queue", "jobs", k, "from", src.Dir, "stream", info.Config.Name)
	}
	if moved != nil {
		if err := moved(); err != nil {
			return n, err
		}
	}
	for _, f := range streams {
		name := f.stream.CachedInfo().Config.Name
		if err := sjs.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return n, fmt.Errorf("take over the queue in %s: delete %s once copied: %w", src.Dir, name, err)
		}
	}
	return n, nil
}

// openSource starts a server of its own on the source's folder, without a
// listener, and connects to it in-process.
func openSource(src QueueSource, log *slog.Logger) (*nats.Conn, func(), error) {
	opts := &server.Options{
		ServerName: "scribe-takeover", JetStream: true, StoreDir: src.Dir,
		DontListen: true, NoSigs: true, SyncAlways: true,
	}
	user, pass := "takeover", secret()
	var acc *server.Account
	if name := src.account(); name != "" {
		acc = server.NewAccount(name)
		opts.Accounts = []*server.Account{acc}
	}
	opts.Users = []*server.User{{Username: user, Password: pass, Account: acc}}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("open the queue in %s: %w", src.Dir, err)
	}
	ns.SetLoggerV2(&slogAdapter{l: log.With("queue", src.Dir), generated: true}, false, false, false)
	ns.Start()
	stop := func() { ns.Shutdown(); ns.WaitForShutdown() }
	if !ns.ReadyForConnections(10 * time.Second) {
		stop()
		return nil, nil, fmt.Errorf("open the queue in %s: not ready after 10s", src.Dir)
	}
	if acc != nil {
		if a, err := ns.LookupAccount(acc.Name); err != nil {
			stop()
			return nil, nil, fmt.Errorf("open the queue in %s: %w", src.Dir, err)
		} else if err := a.EnableJetStream(nil, nil); err != nil {
			stop()
			return nil, nil, fmt.Errorf("open the queue in %s: %w", src.Dir, err)
		}
	}
	conn, err := nats.Connect("", nats.InProcessServer(ns), nats.UserInfo(user, pass), nats.Name("scribe-takeover"),
		nats.Timeout(inProcessTimeout))
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("open the queue in %s: %w", src.Dir, err)
	}
	return conn, func() { conn.Close(); stop() }, nil
}

// copyStream stores every job of from, in order, in the stream of store
// ID id of the target, created if needed. It returns how many it copied.
func copyStream(ctx context.Context, from jetstream.Stream, to jetstream.JetStream, id string, limits queue.Limits) (int, error) {
	target, err := queue.CreateStream(ctx, to, id, limits)
	if errors.Is(err, queue.ErrNoSpace) {
		// As the writer does: an existing queue that cannot reserve new
		// limits keeps its former ones.
		target, err = to.Stream(ctx, queue.StreamName(id))
	}
	if err != nil {
		return 0, err
	}
	name := target.CachedInfo().Config.Name
	info, err := from.Info(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := from.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // acked, a gap in the work queue
		}
		if err != nil {
			return n, fmt.Errorf("read job seq %d: %w", seq, err)
		}
		subject := queue.JobsSubject(id)
		if strings.HasSuffix(m.Subject, ".high") {
			subject = queue.HighJobsSubject(id)
		}
		msg := &nats.Msg{Subject: subject, Header: m.Header, Data: m.Data}
		if _, err := to.PublishMsg(ctx, msg, jetstream.WithExpectStream(name)); err != nil {
			return n, fmt.Errorf("store job seq %d (%s) in %s: %w", seq, m.Header.Get(nats.MsgIdHdr), name, err)
		}
		n++
	}
	return n, nil
}

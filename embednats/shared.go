package embednats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/queue/discovery"
)

// accountPrefix starts the name of a store's account on a shared server.
const accountPrefix = "scribe-"

// AccountName is the account of the store whose ID is storeID on a
// server of several stores (StartShared): its queue is kept under
// <shared queue folder>/jetstream/jetstream/<account>.
func AccountName(storeID string) string { return accountPrefix + storeID }

// accountStoreID returns the store ID an account name was made from by
// AccountName, and false if it is not a store's account.
func accountStoreID(name string) (string, bool) {
	id, ok := strings.CutPrefix(name, accountPrefix)
	if !ok {
		return "", false
	}
	_, ok = queue.StreamStoreID(queue.StreamName(id))
	return id, ok
}

// StartShared starts one server for the stores whose daemon locks are
// locks, keeping their queues in the shared queue folder qd. Each store
// gets an account of its own (AccountName), with the daemon's connection
// for it (StoreConn) and its submitters' user (StoreDiscovery): a
// submitter can reach its store's subjects only, and sees nothing of the
// others'. The locks and qd must stay held until the server is closed.
//
// The folder may hold the queues of stores that are not among locks (a
// daemon that served other stores before): the server loads them and
// keeps them, never serving them. It deletes those that are empty and
// lists the others (Unserved), so that their jobs are reported, never
// lost.
func StartShared(ctx context.Context, qd *discovery.QueueDir, locks []*discovery.Lock, cfg Config) (*Server, error) {
	if len(locks) == 0 {
		return nil, errors.New("start nats: no store to serve")
	}
	spec := startSpec{queueDir: qd.JetStream(), name: "scribe-shared", certName: fmt.Sprintf("(%d stores)", len(locks)), shared: true}
	served := map[string]bool{}
	for _, lk := range locks {
		spec.stores = append(spec.stores, lk.Layout().Root)
		served[AccountName(queue.StoreID(lk.Layout().Root))] = true
	}
	// nats-server keeps an account's data in <store dir>/jetstream/<account>.
	entries, err := os.ReadDir(filepath.Join(qd.JetStream(), "jetstream"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read shared queue folder: %w", err)
	}
	for _, e := range entries {
		if _, ok := accountStoreID(e.Name()); ok && e.IsDir() && !served[e.Name()] {
			spec.unserved = append(spec.unserved, e.Name())
		}
	}
	return start(ctx, cfg, spec)
}

// Unserved is the queue of a store that a shared queue folder holds and
// the server does not serve.
type Unserved struct {
	StoreID string
	// Jobs is how many jobs wait in it.
	Jobs uint64
}

// Unserved lists the queues with jobs that the server keeps for stores it
// does not serve (see StartShared).
func (s *Server) Unserved() []Unserved { return s.unserved }

// lookUnserved counts the jobs in the queues of the unserved accounts
// and deletes the streams that are empty (releasing what they reserve).
func (s *Server) lookUnserved(ctx context.Context, accounts []string, pass map[string]string) error {
	for _, name := range accounts {
		id, _ := accountStoreID(name)
		conn, err := s.connect("daemon-"+name, pass[name])
		if err != nil {
			return err
		}
		jobs, err := s.tidyUnserved(ctx, conn)
		conn.Close()
		if err != nil {
			return fmt.Errorf("look at the queue of store %s, not served: %w", id, err)
		}
		if jobs > 0 {
			s.unserved = append(s.unserved, Unserved{StoreID: id, Jobs: jobs})
		}
	}
	return nil
}

// tidyUnserved deletes the empty streams of an account and returns how
// many jobs the others hold.
func (s *Server) tidyUnserved(ctx context.Context, conn *nats.Conn) (uint64, error) {
	js, err := jetstream.New(conn)
	if err != nil {
		return 0, err
	}
	var jobs uint64
	lister := js.ListStreams(ctx)
	var empty []string
	for info := range lister.Info() {
		if info.State.Msgs == 0 {
			empty = append(empty, info.Config.Name)
		}
		jobs += info.State.Msgs
	}
	if err := lister.Err(); err != nil {
		return 0, err
	}
	for _, name := range empty {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, err
		}
	}
	return jobs, nil
}

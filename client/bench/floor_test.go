package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/scribehq/scribe/queue"
)

// The floor under scribe's throughput: what the messaging of a job costs
// on this machine with nothing of scribe's in it, against blocking flock
// in the same rounds. Each job of a "nats" producer is the skeleton of an
// Apply through a local daemon, over core NATS: subscribe to the job's
// outcome subject, publish the job (without asking for an ack), wait for
// the outcome, unsubscribe; a responder in the server's process sends it.
// "jetstream" queues the job on a file-backed stream (deduplicated by
// Nats-Msg-Id, synced every second) that a pull consumer takes, acking
// each job and publishing its outcome, as scribe's writer does without the
// journal or the files; "jetstream-always" syncs the stream at every job,
// as `scribe serve --sync always` does. "jetstream-journal" is that
// stream synced every second with the least a writer must do before an
// applied outcome under `--sync 1s`: each batch the consumer has taken
// recorded in a bbolt journal in one transaction (each job's ID and data,
// so that the file can be redone from it), then each job's data appended
// to a file, unsynced; data of 64 KiB or more is appended and synced
// first, and the journal records only the IDs. "daemon" sends the same producers' jobs to a real
// `scribe serve --sync 1s` (the least client in front of scribe's daemon),
// as the protocol's docs tell any NATS client to. "jetstream-submit" is
// the skeleton of a Submit: the job published to the stream synced every
// second, the PubAck awaited, no outcome; timed, as `scribe bench` times
// Submit-only runs, until the consumer has taken every job. Producers are
// processes on one processor, over pinned TLS first with X25519, as
// scribe's are on loopback.
//
//	go test -run '^$' -bench 'Floor$' -benchtime 1x ./client/bench/
//
// SCRIBE_FLOOR_PRODUCERS (default 32), SCRIBE_FLOOR_ROUNDS (3) and
// SCRIBE_FLOOR_SECONDS (2) size it; SCRIBE_FLOOR_WORKLOAD (append) is the
// data of each job and what flock does with it, as in `scribe bench`.
func BenchmarkFloor(b *testing.B) {
	producers, rounds, seconds := envInt("SCRIBE_FLOOR_PRODUCERS", 32), envInt("SCRIBE_FLOOR_ROUNDS", 3), envInt("SCRIBE_FLOOR_SECONDS", 2)
	w := floorWorkload(b)
	kinds := []string{"flock", "nats", "jetstream", "jetstream-journal", "daemon", "jetstream-always", "jetstream-submit"}
	scribed := buildScribed(b)
	for b.Loop() {
		figs := map[string][]floorFigures{}
		for range rounds {
			for _, k := range kinds {
				figs[k] = append(figs[k], runFloor(b, k, scribed, producers, time.Duration(seconds)*time.Second))
			}
		}
		for _, k := range kinds {
			var jobs, client, srv, vs []float64
			for i, f := range figs[k] {
				jobs, client, srv = append(jobs, f.jobsPerSec), append(client, f.clientUS), append(srv, f.serverUS)
				vs = append(vs, f.jobsPerSec/figs["flock"][i].jobsPerSec)
			}
			b.Logf("%-17s %s, %d producers: %6.0f jobs/s (%.2fx flock), CPU µs/job %4.0f (producers %4.0f + server %3.0f); medians of %d rounds",
				k, w.Name, producers, median(jobs), median(vs), median(client)+median(srv), median(client), median(srv), rounds)
			b.ReportMetric(median(jobs), k+"-jobs/s")
			b.ReportMetric(median(client)+median(srv), k+"-cpu-µs/job")
		}
	}
}

// BenchmarkFloorHook times testdata/floorhook, the least a Go hook can
// do, as processes one after another through a JetStream stream synced at
// every job (the bench's hooks go through `scribe serve --sync always`),
// each paired with a flock(1) + dd writer as `scribe bench` runs them: the
// floor under a hook's wall time and CPU on this machine. Each pair also
// runs it through a second such stream whose consumer, before it acks the
// job and sends its outcome, does what an applied outcome says was done
// under --sync always: the job recorded in a bbolt journal (one
// transaction) and its data appended to a file and fsynced. Then the same
// floorhook through a real `scribe serve --sync always` (scribe's daemon,
// the least client), and `scribe submit --wait` itself: what scribe's
// daemon adds is the third against the second, what its client adds is
// the fourth against the third.
//
//	go test -run '^$' -bench FloorHook -benchtime 1x ./client/bench/
//
// SCRIBE_FLOOR_HOOKS (default 20) is how many of each.
func BenchmarkFloorHook(b *testing.B) {
	flockBin, err := exec.LookPath("flock")
	if err != nil {
		b.Skip("no flock(1) here")
	}
	dd, err := exec.LookPath("dd")
	require.NoError(b, err)
	bins := buildFloorBins(b, "./testdata/floorhook", "github.com/scribehq/scribe/cmd/scribe", "github.com/scribehq/scribe/cmd/scribed")
	bin := filepath.Join(bins, "floorhook")
	dir := b.TempDir()
	url, cert, _, stop := floorServer(b, "jetstream-always", filepath.Join(dir, "q"))
	defer stop()
	jurl, jcert, _, jstop := floorServer(b, "jetstream-always-journal", filepath.Join(dir, "qj"))
	defer jstop()
	store := filepath.Join(dir, "store")
	require.NoError(b, os.Mkdir(store, 0o755))
	d, err := startBenchDaemon(context.Background(), filepath.Join(bins, "scribed"), "", dir, store, "always")
	require.NoError(b, err)
	defer func() { require.NoError(b, d.stop()) }()
	line := filepath.Join(dir, "line")
	require.NoError(b, os.WriteFile(line, []byte("a line\n"), 0o644))
	n := envInt("SCRIBE_FLOOR_HOOKS", 20)
	run := func(cmd *exec.Cmd) (wall, cpu float64) {
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		require.NoError(b, err, "%s", out)
		wall = float64(time.Since(t0).Microseconds()) / 1000
		return wall, float64((cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Microseconds()) / 1000
	}
	hook := func(env ...string) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), env...)
		return cmd
	}
	// The contenders of each pair, in the order each pair runs them.
	kinds := []struct{ name, what string }{
		{"floor", "floorhook"},
		{"journal", "floorhook, journal and file synced before the outcome"},
		{"daemon", "floorhook through scribe serve --sync always"},
		{"scribe", "scribe submit --wait through the same daemon"},
		{"flock", "flock(1) + dd"},
	}
	cmds := map[string]func(i int) *exec.Cmd{
		"floor":   func(int) *exec.Cmd { return hook("SCRIBE_FLOOR_URL="+url, "SCRIBE_FLOOR_CERT="+cert) },
		"journal": func(int) *exec.Cmd { return hook("SCRIBE_FLOOR_URL="+jurl, "SCRIBE_FLOOR_CERT="+jcert) },
		"daemon":  func(int) *exec.Cmd { return hook("SCRIBE_FLOOR_STORE=" + store) },
		"scribe": func(i int) *exec.Cmd {
			return exec.Command(filepath.Join(bins, "scribe"), "submit", "--store", store, "--route", "require", "--wait",
				"append", "log.txt", fmt.Sprintf("line %d\n", i))
		},
		"flock": func(int) *exec.Cmd {
			return exec.Command(flockBin, filepath.Join(dir, "lock"), dd, "if="+line, "of="+filepath.Join(dir, "log.txt"),
				"oflag=append", "conv=notrunc,fsync", "status=none")
		},
	}
	for b.Loop() {
		wall, cpu, ratio := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		var server time.Duration
		for i := range n {
			got := map[string]float64{}
			for _, k := range kinds {
				cpu0 := selfCPU(b)
				w, c := run(cmds[k.name](i))
				if k.name == "floor" {
					server += selfCPU(b) - cpu0
				}
				got[k.name] = w
				wall[k.name], cpu[k.name] = append(wall[k.name], w), append(cpu[k.name], c)
			}
			for _, k := range kinds {
				ratio[k.name] = append(ratio[k.name], got[k.name]/got["flock"])
			}
		}
		b.Logf("floorhook's server: CPU %.2f ms per hook (this process's, with its spawning of each)", float64(server.Microseconds())/1000/float64(n))
		for _, k := range kinds {
			b.Logf("%-58s wall p50 %5.2f ms, CPU %4.2f ms, wall %.2fx flock(1) + dd (median of %d pairs)",
				k.what+":", median(wall[k.name]), median(cpu[k.name]), median(ratio[k.name]), n)
		}
		b.ReportMetric(median(wall["floor"]), "hook-wall-ms")
		b.ReportMetric(median(cpu["floor"]), "hook-cpu-ms")
		b.ReportMetric(median(ratio["floor"]), "wall-vs-flock")
		b.ReportMetric(median(ratio["journal"]), "journal-wall-vs-flock")
		b.ReportMetric(median(ratio["daemon"]), "daemon-wall-vs-flock")
		b.ReportMetric(median(ratio["scribe"]), "scribe-wall-vs-flock")
	}
}

// buildFloorBins builds the packages into a temporary folder, as the
// README builds scribe.
func buildFloorBins(b *testing.B, pkgs ...string) string {
	bins := b.TempDir()
	build := exec.Command("go", append([]string{"build", "-o", bins + "/"}, pkgs...)...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(b, err, "%s", out)
	return bins
}

// buildScribed is the path of a fresh build of scribe's daemon.
func buildScribed(b *testing.B) string {
	return filepath.Join(buildFloorBins(b, "github.com/scribehq/scribe/cmd/scribed"), "scribed")
}

type floorFigures struct{ jobsPerSec, clientUS, serverUS float64 }

// runFloor runs one round of kind: a server (scribed's daemon for
// "daemon"), then the producer processes, each this test binary re-run
// (TestMain).
func runFloor(b *testing.B, kind, scribed string, producers int, d time.Duration) floorFigures {
	b.Helper()
	dir := b.TempDir()
	env := []string{floorModeEnv + "=" + kind, "SCRIBE_FLOOR_DIR=" + dir, "SCRIBE_FLOOR_DURATION=" + d.String(), "GOMAXPROCS=1"}
	if w := os.Getenv("SCRIBE_FLOOR_WORKLOAD"); w != "" {
		env = append(env, "SCRIBE_FLOOR_WORKLOAD="+w)
	}
	var taken *takenCount
	serverCPU := func() time.Duration { return selfCPU(b) }
	switch kind {
	case "flock":
	case "daemon":
		store := filepath.Join(dir, "store")
		require.NoError(b, os.Mkdir(store, 0o755))
		dm, err := startBenchDaemon(context.Background(), scribed, "", dir, store, "1s")
		require.NoError(b, err)
		defer func() { require.NoError(b, dm.stop()) }()
		serverCPU = func() time.Duration {
			t, ok := procCPU(dm.pid)
			require.True(b, ok, "the daemon's CPU time")
			return t
		}
		env = append(env, "SCRIBE_FLOOR_STORE="+store)
	default:
		var url, cert string
		var stop func()
		url, cert, taken, stop = floorServer(b, kind, dir)
		defer stop()
		env = append(env, "SCRIBE_FLOOR_URL="+url, "SCRIBE_FLOOR_CERT="+cert)
	}
	cpu0 := serverCPU()
	var mu sync.Mutex
	var wg sync.WaitGroup
	jobs, cpu := 0, time.Duration(0)
	for p := range producers {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(append(os.Environ(), env...), fmt.Sprintf("SCRIBE_FLOOR_P=%d", p))
			out, err := cmd.Output()
			n, perr := strconv.Atoi(strings.TrimSpace(string(out)))
			mu.Lock()
			defer mu.Unlock()
			if err != nil || perr != nil {
				b.Errorf("floor producer %d: %v %v: %s", p, err, perr, out)
				return
			}
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			jobs += n
			cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		})
	}
	wg.Wait()
	if kind == "jetstream-submit" {
		// A Submit is counted once its job is taken from the queue.
		t0 := time.Now()
		if !taken.wait(jobs, time.Minute) {
			b.Fatalf("%s: %d of %d jobs taken after a minute", kind, taken.n.Load(), jobs)
		}
		d += time.Since(t0)
	}
	srv := serverCPU() - cpu0
	if jobs == 0 {
		b.Fatalf("%s: no job done", kind)
	}
	f := floorFigures{jobsPerSec: float64(jobs) / d.Seconds(), clientUS: float64(cpu.Microseconds()) / float64(jobs)}
	if kind != "flock" {
		f.serverUS = float64(srv.Microseconds()) / float64(jobs)
	}
	return f
}

// selfCPU is this process's CPU time so far: the server's, while the
// producers run (the rest of the process waits).
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// floorServer starts a NATS server (with JetStream, its store in dir, but
// for nats) that takes TLS first with a certificate of its own, and the
// responder or the consumer that answers the producers' jobs in process;
// taken counts the jobs the consumer took (acked). The consumer of
// jetstream-always-journal records each job in a bbolt journal and appends
// its data to a file, fsynced, before it acks it; that of
// jetstream-journal records each batch in one transaction, then appends
// its jobs' data unsynced (big data: synced, before).
func floorServer(b *testing.B, kind, dir string) (url, certPEM string, taken *takenCount, stop func()) {
	js := kind != "nats"
	var record func(m jetstream.Msg) error
	var recordBatch func(ms []jetstream.Msg) error
	switch kind {
	case "jetstream-journal":
		db, f := floorJournal(b, dir)
		recordBatch = func(ms []jetstream.Msg) error {
			// Big data is written and synced first, and the journal names
			// it; small data is kept in the journal, from which the file
			// could be redone, and written unsynced after. So scribe does
			// with data of 64 KiB or more, and with the rest.
			big := len(ms[0].Data()) >= 64<<10
			if big {
				for _, m := range ms {
					if _, err := f.Write(m.Data()); err != nil {
						return err
					}
				}
				if err := f.Sync(); err != nil {
					return err
				}
			}
			if err := db.Update(func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte("outcomes"))
				if err != nil {
					return err
				}
				for _, m := range ms {
					v := m.Data()
					if big {
						v = []byte("staged")
					}
					if err := bk.Put([]byte(m.Headers().Get("Nats-Msg-Id")), v); err != nil {
						return err
					}
				}
				return nil
			}); err != nil || big {
				return err
			}
			for _, m := range ms {
				if _, err := f.Write(m.Data()); err != nil {
					return err
				}
			}
			return nil
		}
	case "jetstream-always-journal":
		db, f := floorJournal(b, dir)
		record = func(m jetstream.Msg) error {
			if err := db.Update(func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte("outcomes"))
				if err != nil {
					return err
				}
				return bk.Put([]byte(m.Headers().Get("Nats-Msg-Id")), []byte("applied"))
			}); err != nil {
				return err
			}
			if _, err := f.Write(m.Data()); err != nil {
				return err
			}
			return f.Sync()
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(b, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "floor"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(b, err)
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, TLS: true, TLSHandshakeFirst: true, MaxPayload: 8 << 20,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS13}}
	if js {
		opts.JetStream, opts.StoreDir, opts.SyncInterval, opts.SyncAlways = true, dir, time.Second, strings.HasPrefix(kind, "jetstream-always")
	}
	ns, err := server.NewServer(opts)
	require.NoError(b, err)
	go ns.Start()
	require.True(b, ns.ReadyForConnections(10*time.Second))
	rc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(b, err)
	outcome := make([]byte, 300)
	taken = &takenCount{moved: make(chan struct{}, 1)}
	if js {
		ctx := context.Background()
		j, err := jetstream.New(rc)
		require.NoError(b, err)
		st, err := j.CreateStream(ctx, jetstream.StreamConfig{Name: "Q", Subjects: []string{"jobs.>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute})
		require.NoError(b, err)
		cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "writer", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4096})
		require.NoError(b, err)
		// As scribe's writer asks: at most 256 jobs or 64 MiB in hand.
		it, err := cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(256, 64<<20))
		require.NoError(b, err)
		// A batch is what the consumer has taken by the time the last one
		// is done, as scribe's writer batches.
		taking := make(chan jetstream.Msg, 256)
		go func() {
			defer close(taking)
			for {
				m, err := it.Next()
				if err != nil {
					return // stopped
				}
				taking <- m
			}
		}()
		go func() {
			for m := range taking {
				batch := []jetstream.Msg{m}
				for more := true; more && len(batch) < cap(taking); {
					select {
					case m, ok := <-taking:
						if more = ok; ok {
							batch = append(batch, m)
						}
					default:
						more = false
					}
				}
				// A floor that cannot do its work measures nothing.
				if recordBatch != nil {
					if err := recordBatch(batch); err != nil {
						panic(err)
					}
				}
				for _, m := range batch {
					if record != nil {
						if err := record(m); err != nil {
							panic(err)
						}
					}
					_ = m.Ack()
					taken.add()
					_ = rc.Publish("outcomes."+strings.TrimPrefix(m.Subject(), "jobs."), outcome)
				}
			}
		}()
		stop = func() { it.Stop(); rc.Close(); ns.Shutdown() }
	} else {
		_, err := rc.Subscribe("jobs.>", func(m *nats.Msg) {
			_ = rc.Publish("outcomes."+strings.TrimPrefix(m.Subject, "jobs."), outcome)
		})
		require.NoError(b, err)
		stop = func() { rc.Close(); ns.Shutdown() }
	}
	require.NoError(b, rc.Flush())
	return "tls://" + ns.Addr().String(), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), taken, stop
}

// floorJournal opens a floor's bbolt journal and the file it appends to.
func floorJournal(b *testing.B, dir string) (*bolt.DB, *os.File) {
	require.NoError(b, os.MkdirAll(dir, 0o755))
	db, err := bolt.Open(filepath.Join(dir, "journal.db"), 0o600, nil)
	require.NoError(b, err)
	b.Cleanup(func() { db.Close() })
	f, err := os.OpenFile(filepath.Join(dir, "log.txt"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	require.NoError(b, err)
	b.Cleanup(func() { f.Close() })
	return db, f
}

// takenCount counts the jobs a floor server's consumer took.
type takenCount struct {
	n     atomic.Int64
	moved chan struct{} // a token after each job taken
}

func (t *takenCount) add() {
	t.n.Add(1)
	select {
	case t.moved <- struct{}{}:
	default:
	}
}

// wait reports whether jobs were taken within limit.
func (t *takenCount) wait(jobs int, limit time.Duration) bool {
	timeout := time.After(limit)
	for t.n.Load() < int64(jobs) {
		select {
		case <-t.moved:
		case <-timeout:
			return false
		}
	}
	return true
}

const floorModeEnv = "SCRIBE_FLOOR_MODE"

// TestMain makes this test binary a producer of BenchmarkFloor when
// floorModeEnv says which: it produces for SCRIBE_FLOOR_DURATION and
// prints how many jobs it did.
func TestMain(m *testing.M) {
	kind := os.Getenv(floorModeEnv)
	if kind == "" {
		os.Exit(m.Run())
	}
	n, err := floorProduce(kind)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(n)
	os.Exit(0)
}

func floorProduce(kind string) (int, error) {
	d, err := time.ParseDuration(os.Getenv("SCRIBE_FLOOR_DURATION"))
	if err != nil {
		return 0, err
	}
	p, _ := strconv.Atoi(os.Getenv("SCRIBE_FLOOR_P"))
	w, err := pickWorkload(os.Getenv("SCRIBE_FLOOR_WORKLOAD"))
	if err != nil {
		return 0, err
	}
	until := time.Now().Add(d)
	if kind == "flock" {
		f, err := openFlockWorker(os.Getenv("SCRIBE_FLOOR_DIR"), w, p, false)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		n := 0
		for ; time.Now().Before(until); n++ {
			if _, _, err := f.Do(context.Background(), n+1); err != nil {
				return n, err
			}
		}
		return n, nil
	}
	t, err := floorTargetOf(kind)
	if err != nil {
		return 0, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(t.cert))
	opts := []nats.Option{nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, CurvePreferences: []tls.CurveID{tls.X25519}}),
		nats.TLSHandshakeFirst(), nats.SyncQueueLen(4), nats.NoReconnect()}
	if t.user != "" {
		opts = append(opts, nats.UserInfo(t.user, t.password))
	}
	nc, err := nats.Connect(t.url, opts...)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	op, path, job := benchJob(w, p, 1)
	n := 0
	if kind == "jetstream-submit" {
		js, err := jetstream.New(nc)
		if err != nil {
			return 0, err
		}
		for ; time.Now().Before(until); n++ {
			id := fmt.Sprintf("p%d-%d", p, n)
			m := nats.NewMsg("jobs." + id)
			m.Data = job
			m.Header.Set(jetstream.MsgIDHeader, id)
			m.Header.Set(jetstream.ExpectedStreamHeader, "Q")
			if _, err := js.PublishMsg(context.Background(), m); err != nil {
				return n, fmt.Errorf("job %s: %w", id, err)
			}
		}
		return n, nil
	}
	for ; time.Now().Before(until); n++ {
		id := fmt.Sprintf("p%d-%d", p, n)
		sub, err := nc.SubscribeSync(t.outcomes + id)
		if err != nil {
			return n, err
		}
		m := nats.NewMsg("jobs." + id)
		m.Data = job
		if t.store != "" {
			// A version 2 job: its JSON value, a newline, its data.
			m.Subject = t.jobs
			m.Data = append(fmt.Appendf(nil, `{"v":2,"id":%q,"store":%q,"ops":[{"op":%q,"path":%q,"data_len":%d}]}`+"\n", id, t.store, op, path, len(job)), job...)
		}
		m.Header.Set("Nats-Msg-Id", id)
		if err := nc.PublishMsg(m); err != nil {
			return n, fmt.Errorf("job %s: %w", id, err)
		}
		o, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			return n, fmt.Errorf("outcome %s: %w", id, err)
		}
		if t.store != "" {
			var out struct{ Status, Detail string }
			if err := json.Unmarshal(o.Data, &out); err != nil {
				return n, err
			}
			if out.Status != "applied" {
				return n, fmt.Errorf("job %s %s: %s", id, out.Status, out.Detail)
			}
		}
		_ = sub.Unsubscribe()
	}
	return n, nil
}

// floorTarget is where a floor producer's jobs go: the floor server's
// subjects, or, for "daemon", the store's daemon, from its discovery file
// and on its store's subjects.
type floorTarget struct {
	url, cert, user, password string
	jobs, outcomes, store     string
}

func floorTargetOf(kind string) (floorTarget, error) {
	if kind != "daemon" {
		return floorTarget{url: os.Getenv("SCRIBE_FLOOR_URL"), cert: os.Getenv("SCRIBE_FLOOR_CERT"), outcomes: "outcomes."}, nil
	}
	d, err := queue.Layout{Root: os.Getenv("SCRIBE_FLOOR_STORE")}.ReadDiscovery()
	if err != nil {
		return floorTarget{}, err
	}
	return floorTarget{url: d.URL, cert: d.TLSCert, user: d.User, password: d.Password,
		jobs: queue.JobsSubject(d.StoreID), outcomes: queue.OutcomeSubject(d.StoreID, ""), store: d.StoreID}, nil
}

// floorWorkload is SCRIBE_FLOOR_WORKLOAD's workload.
func floorWorkload(b *testing.B) Workload {
	w, err := pickWorkload(os.Getenv("SCRIBE_FLOOR_WORKLOAD"))
	require.NoError(b, err)
	return w
}

// pickWorkload is the workload of that name; append when it is empty.
func pickWorkload(name string) (Workload, error) {
	for _, w := range workloads {
		if w.Name == name || name == "" {
			return w, nil
		}
	}
	return Workload{}, fmt.Errorf("SCRIBE_FLOOR_WORKLOAD %q: no such workload", name)
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

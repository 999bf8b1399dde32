package daemon

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/scribehq/scribe/writer/daemon/metricsaddr"
	"github.com/scribehq/scribe/writer/exec"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/scribehq/scribe/queue"
)

// The daemon's metrics (docs/running.md#metrics). They live here, not in
// writer: package client links writer, and a hook binary must not carry
// a metrics library. Each store's Writer reports through its Observer.

// metrics is a daemon's Prometheus registry and the Observer that feeds
// it.
type metrics struct {
	reg        *prometheus.Registry
	jobs       *prometheus.CounterVec // status, reason
	duplicates prometheus.Counter
	batchSize  prometheus.Histogram
	applySecs  prometheus.Histogram
	latency    *prometheus.HistogramVec // status
	lockWait   prometheus.Histogram
	lockHold   prometheus.Histogram
	deferrals  *prometheus.CounterVec   // command
	execRuns   *prometheus.CounterVec   // command, result
	execSecs   *prometheus.HistogramVec // command
	starts     prometheus.Counter
	startTime  prometheus.Gauge
	info       *prometheus.GaugeVec // version, store, store_id
}

var _ Observer = (*metrics)(nil)

// Histogram buckets, in seconds unless said otherwise.
var (
	// A batch is 1 to --batch jobs (default 256).
	batchBuckets = prometheus.ExponentialBuckets(1, 2, 11) // 1 … 1024 jobs
	// An fsynced batch takes from a fraction of a millisecond to seconds
	// on a slow disk; a job waits as long, or much longer behind a held
	// store.
	applyBuckets   = prometheus.ExponentialBuckets(0.0005, 2, 16) // 0.5 ms … 16 s
	latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 18)  // 1 ms … 131 s
	// The store is usually free (a wait of microseconds); a direct
	// writer or a tool's lock can keep it for minutes.
	waitBuckets = prometheus.ExponentialBuckets(0.0001, 4, 12) // 0.1 ms … 7 min
	// A hold lasts a burst of batches plus --idle-release (500 ms).
	holdBuckets = prometheus.ExponentialBuckets(0.01, 2, 16) // 10 ms … 5.5 min
	execBuckets = prometheus.ExponentialBuckets(0.01, 4, 10) // 10 ms … 44 min
)

// newMetrics makes the registry: scribe's metrics, and the Go runtime's
// and the process's.
func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scribe_jobs_total",
			Help: "Jobs decided, by status (applied, rejected) and reason (empty when applied). Duplicates are not counted: see scribe_duplicate_jobs_total.",
		}, []string{"status", "reason"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scribe_duplicate_jobs_total",
			Help: "Jobs whose ID already had an outcome (a redelivery or a retried submit): answered with it, nothing applied again.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "scribe_batch_size", Help: "Jobs per applied batch (one journal transaction).", Buckets: batchBuckets,
		}),
		applySecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "scribe_batch_apply_seconds", Help: "Time to apply a batch: ops, fsyncs and the journal commit.", Buckets: applyBuckets,
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "scribe_job_latency_seconds",
			Help:    "From the job's submitted time (set by the client) to its outcome, by status; jobs without a submitted time are not observed.",
			Buckets: latencyBuckets,
		}, []string{"status"}),
		lockWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "scribe_lock_wait_seconds", Help: "Time waiting for the store lock before a batch could be applied.", Buckets: waitBuckets,
		}),
		lockHold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "scribe_lock_hold_seconds", Help: "How long a hold of the store lock lasted, observed when the daemon let it go.", Buckets: holdBuckets,
		}),
		deferrals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scribe_exec_deferrals_total", Help: "Exec jobs deferred because their command was busy, by command.",
		}, []string{"command"}),
		execRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scribe_exec_runs_total",
			Help: "Exec command runs, by command and result: ok, failed, busy, killed, timeout, start_failed, stopped.",
		}, []string{"command", "result"}),
		execSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "scribe_exec_duration_seconds", Help: "How long exec command runs took, by command.", Buckets: execBuckets,
		}, []string{"command"}),
		starts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scribe_daemon_starts_total",
			Help: "Daemon starts: 1 in each process. A restart resets it; count restarts with changes(scribe_daemon_start_time_seconds[…]).",
		}),
		startTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scribe_daemon_start_time_seconds", Help: "When the daemon started, in seconds since the Unix epoch.",
		}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "scribe_daemon_info", Help: "The daemon's version and store; always 1.",
		}, []string{"version", "store", "store_id"}),
	}
	m.reg.MustRegister(m.jobs, m.duplicates, m.batchSize, m.applySecs, m.latency, m.lockWait, m.lockHold,
		m.deferrals, m.execRuns, m.execSecs, m.starts, m.startTime, m.info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Series that exist from the start read 0 rather than missing.
	m.jobs.WithLabelValues(string(queue.StatusApplied), "")
	return m
}

// started records the daemon's start, for the store it serves and the
// allowlisted commands it may run.
func (m *metrics) started(at time.Time, version, store string, commands []exec.Command) {
	m.starts.Inc()
	m.startTime.Set(float64(at.UnixNano()) / 1e9)
	m.info.WithLabelValues(version, store, queue.StoreID(store)).Set(1)
	for _, c := range commands {
		m.deferrals.WithLabelValues(c.Name)
		m.execSecs.WithLabelValues(c.Name)
		for _, end := range exec.Endings {
			m.execRuns.WithLabelValues(c.Name, end)
		}
	}
}

// watchQueue adds the queue depth gauge, read from the writer's queue at
// each scrape. A queue that cannot be read reads NaN.
func (m *metrics) watchQueue(w *Writer) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "scribe_queue_depth",
		Help: "Jobs waiting in the store's queue (and in the queues of its former paths), not yet applied and acked.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := w.Queued(ctx)
		if err != nil {
			return math.NaN()
		}
		return float64(n)
	}))
}

// BatchApplied implements Observer.
func (m *metrics) BatchApplied(size int, took time.Duration) {
	m.batchSize.Observe(float64(size))
	m.applySecs.Observe(took.Seconds())
}

// Outcome implements Observer.
func (m *metrics) Outcome(o *queue.Outcome, submitted time.Time, dup bool) {
	if dup {
		m.duplicates.Inc()
		return
	}
	m.jobs.WithLabelValues(string(o.Status), string(o.Reason)).Inc()
	// The submitted time is the client's clock: a client ahead of the
	// daemon's would make a negative latency, which is left out.
	if !submitted.IsZero() && !o.At.Before(submitted) {
		m.latency.WithLabelValues(string(o.Status)).Observe(o.At.Sub(submitted).Seconds())
	}
}

// LockWaited implements Observer.
func (m *metrics) LockWaited(d time.Duration) { m.lockWait.Observe(d.Seconds()) }

// LockHeld implements Observer.
func (m *metrics) LockHeld(d time.Duration) { m.lockHold.Observe(d.Seconds()) }

// Deferred implements Observer.
func (m *metrics) Deferred(command string) { m.deferrals.WithLabelValues(command).Inc() }

// ExecRan implements Observer.
func (m *metrics) ExecRan(command, result string, took time.Duration) {
	m.execRuns.WithLabelValues(command, result).Inc()
	m.execSecs.WithLabelValues(command).Observe(took.Seconds())
}

// unixPrefix marks a --metrics-addr that is a Unix socket's path.
const unixPrefix = metricsaddr.UnixPrefix

// metricsAddr is the address --metrics-addr ADDR listens on: one without
// a host (":9464") is loopback's, and it says whether the host is not a
// loopback one (worth a warning: the metrics name the store).
func metricsAddr(addr string) (hostPort string, exposed bool, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, badConfig("--metrics-addr %q: want HOST:PORT, :PORT or unix:PATH (%v)", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	exposed = host != "localhost" && (ip == nil || !ip.IsLoopback())
	return net.JoinHostPort(host, port), exposed, nil
}

// CheckMetricsAddr checks a metrics address as Metrics.Addr takes it: ""
// (no metrics), HOST:PORT, :PORT or unix:PATH. It reads it only: the
// daemon binds it when it starts.
func CheckMetricsAddr(s string) error { return metricsaddr.Check(s) }

// metricsServer serves a registry at /metrics.
type metricsServer struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
	// socket is the Unix socket's path, "" on TCP.
	socket string
	// token is the bearer token a scrape must present, "" for none.
	token string
}

// listenMetrics binds --metrics-addr (HOST:PORT, or unix:PATH for a Unix
// socket only its owner may connect to), with the bearer token of
// tokenFile if given; Serve starts answering. Binding first makes a taken
// port, a socket in use or a token file others can read fail serve before
// it touches the store.
func listenMetrics(addr, tokenFile string, log *slog.Logger) (*metricsServer, error) {
	s := &metricsServer{}
	if tokenFile != "" {
		token, err := readMetricsToken(tokenFile)
		if err != nil {
			return nil, err
		}
		s.token = token
	}
	if path, ok := strings.CutPrefix(addr, unixPrefix); ok {
		ln, err := listenUnixOwnerOnly(path)
		if err != nil {
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
		s.ln, s.socket = ln, ln.Addr().String()
		return s, nil
	}
	hostPort, exposed, err := metricsAddr(addr)
	if err != nil {
		return nil, err
	}
	switch {
	case exposed:
		log.Warn("the metrics listener is not on a loopback address: anyone who can reach it can read the metrics, which name the store", "addr", hostPort)
	case s.token == "":
		log.Info("the metrics are open to every local user (they name the store): use --metrics-addr unix:PATH or --metrics-token-file to close them", "addr", hostPort)
	}
	ln, err := net.Listen("tcp", hostPort)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	s.ln = ln
	return s, nil
}

// listenUnixOwnerOnly listens on a Unix socket at path that only this
// process's user can connect to: mode 0600 from the moment it exists, in
// a folder of this user's that no one else can write (or they could put
// a socket of their own in its place). A socket left there by a daemon
// that was killed (nothing accepts on it) is replaced; a socket in use,
// or anything else at path, is refused.
func listenUnixOwnerOnly(path string) (net.Listener, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("socket folder: %w", err)
	}
	if err := queue.CheckPrivate(dir, fi, true); err != nil {
		return nil, fmt.Errorf("socket folder: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket (mode %s): remove it, or give another path", path, fi.Mode())
		}
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is in use by another process", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("socket %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil { // a killed daemon's
			return nil, err
		}
	}
	// The umask makes bind(2) create the socket 0600: no instant at which
	// another user could connect. Nothing else in serve creates files
	// meanwhile (the metrics are bound before the store is touched).
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// maxTokenBytes bounds a metrics token file.
const maxTokenBytes = 4096

// readMetricsToken reads the bearer token of --metrics-token-file: a
// regular file (not a symlink, not a FIFO) of this user's that no one else
// can read or write, holding the token; surrounding white space is not
// part of it, as Prometheus's credentials_file reads it.
func readMetricsToken(path string) (string, error) {
	refuse := func(problem, fix string) error {
		return fmt.Errorf("refusing metrics token file %s: it %s; %s", path, problem, fix)
	}
	f, err := queue.OpenPrivate(path, os.O_RDONLY, 0)
	if err != nil {
		return "", fmt.Errorf("metrics token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("metrics token file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o044 != 0 {
		return "", refuse(fmt.Sprintf("is readable by others (mode %s)", fi.Mode()), "chmod 600 "+path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("metrics token file %s: %w", path, err)
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("metrics token file %s: larger than %d bytes: want one token", path, maxTokenBytes)
	}
	token := strings.TrimSpace(string(b))
	switch {
	case token == "":
		return "", fmt.Errorf("metrics token file %s is empty: want a token, such as: head -c 32 /dev/urandom | base64 > %s", path, path)
	case strings.ContainsFunc(token, func(r rune) bool { return r < 0x21 || r > 0x7e }):
		return "", fmt.Errorf("metrics token file %s: the token has a space or a character an HTTP header cannot carry: want printable ASCII", path)
	}
	return token, nil
}

// Addr is the address the server listens on, the port chosen when
// --metrics-addr asked for port 0, or unix:PATH.
func (s *metricsServer) Addr() string {
	if s.socket != "" {
		return unixPrefix + s.socket
	}
	return s.ln.Addr().String()
}

// URL is where a scrape asks: http://ADDR/metrics, or for a Unix socket
// that URL's path on it (curl --unix-socket PATH http://localhost/metrics).
func (s *metricsServer) URL() string {
	if s.socket != "" {
		return "http://localhost/metrics"
	}
	return "http://" + s.Addr() + "/metrics"
}

// Serve answers /metrics from reg until Close: with a token, only to a
// request that presents it (Authorization: Bearer TOKEN); others get 401
// and nothing of the metrics.
func (s *metricsServer) Serve(reg *prometheus.Registry, log *slog.Logger) {
	var h http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: promLogger{log}, Registry: reg, Timeout: 10 * time.Second,
	})
	if s.token != "" {
		h = requireBearer(s.token, h)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
}

// requireBearer lets through to next only the requests whose
// Authorization header is "Bearer TOKEN" (the scheme in any case).
func requireBearer(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="scribe metrics"`)
			http.Error(w, "unauthorized: send the token of the daemon's --metrics-token-file as Authorization: Bearer TOKEN", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Close stops the server, letting a scrape in progress finish for a
// moment, and waits for it. A Unix socket is removed.
func (s *metricsServer) Close() {
	if s.srv == nil {
		_ = s.ln.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}

// promLogger hands promhttp's errors to the daemon's log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) { l.log.Warn("metrics: " + fmt.Sprint(v...)) }

// watchMetrics registers what the metrics say of the stores. With
// several stores the scribe_* metrics are the daemon's, summed over its
// stores; scribe_daemon_info has a series per store.
func (d *Daemon) watchMetrics() {
	met := d.met
	first := d.stores[0]
	met.started(first.d.Started, d.cfg.Version, first.path, d.cfg.Commands)
	if len(d.stores) == 1 {
		met.watchQueue(first.w)
		return
	}
	for _, st := range d.stores[1:] {
		met.info.WithLabelValues(d.cfg.Version, st.path, st.id).Set(1)
	}
	met.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "scribe_queue_depth",
		Help: "Jobs waiting in the queues of the daemon's stores, not yet applied and acked.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var sum uint64
		for _, st := range d.stores {
			n, err := st.w.Queued(ctx)
			if err != nil {
				return math.NaN()
			}
			sum += n
		}
		return float64(sum)
	}))
}

// NewPrometheus returns an Observer that keeps scribe's metrics, the
// ones a Daemon serves at Metrics.Addr (with the Go runtime's and the
// process's), and the handler that serves them in Prometheus's format:
// for a program that runs Writers of its own (WriterConfig.Observer).
func NewPrometheus() (Observer, http.Handler) {
	m := newMetrics()
	return m, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

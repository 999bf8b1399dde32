// Package testkit holds the helpers that tests of several packages share:
// an outside lock holder (flock(1)), a pseudo-terminal and a TCP relay
// that can cut the network. It is for test code only.
package testkit

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// FlockBin is the path of flock(1), which the tests need.
func FlockBin(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("flock")
	require.NoError(t, err, "flock(1) from util-linux is needed")
	return bin
}

// HoldFlock has flock(1), an outside process that knows nothing of
// scribe, hold an exclusive lock on path until release is called (also
// done at cleanup). It returns flock's pid.
func HoldFlock(t testing.TB, path string) (pid int, release func()) {
	t.Helper()
	cmd := exec.Command(FlockBin(t), "--exclusive", path, "sh", "-c", "echo held; read _")
	release = Hold(t, cmd)
	return cmd.Process.Pid, release
}

// Hold starts cmd, an outside lock holder that prints "held" once it
// holds its lock and lets go when its stdin closes, waits for that line,
// and returns the function that makes it let go (also run at cleanup).
func Hold(t testing.TB, cmd *exec.Cmd) (release func()) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := false
	release = func() {
		if !done {
			done = true
			stdin.Close()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(release)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", line)
	return release
}

// OpenPTY returns the two ends of a new pseudo-terminal, closed at
// cleanup, or skips the test where there is none.
func OpenPTY(t testing.TB) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// Relay forwards TCP connections to a backend and records every byte
// clients send through it. It can drop them all, as a lost network
// would, or refuse new ones for a while.
type Relay struct {
	ln      net.Listener
	backend string

	mu      sync.Mutex
	sent    bytes.Buffer
	conns   int // forwarded
	ended   int // forwarded, and closed since
	open    []net.Conn
	refused bool
}

// StartRelay listens on addr ("127.0.0.1:0" for any port) and forwards
// to backend until the test ends. A port a killed process held a moment
// ago is free at once; it is retried for a while, as another user binding
// it would.
func StartRelay(t testing.TB, addr, backend string) *Relay {
	t.Helper()
	r := &Relay{backend: backend}
	var err error
	require.Eventually(t, func() bool {
		r.ln, err = net.Listen("tcp", addr)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "bind %s", addr)
	t.Cleanup(func() { r.ln.Close(); r.Cut() })
	go r.accept()
	return r
}

// Addr is the relay's address.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

func (r *Relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.refused {
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.conns++
		r.open = append(r.open, c)
		r.mu.Unlock()
		go r.forward(c)
	}
}

func (r *Relay) forward(c net.Conn) {
	defer func() {
		c.Close()
		r.mu.Lock()
		r.ended++
		r.mu.Unlock()
	}()
	b, err := net.Dial("tcp", r.backend)
	if err != nil {
		return
	}
	defer b.Close()
	go func() { _, _ = io.Copy(c, b); c.Close() }()
	buf := make([]byte, 32*1024)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			r.mu.Lock()
			r.sent.Write(buf[:n])
			r.mu.Unlock()
			if _, werr := b.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Cut drops every connection made so far.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.open {
		c.Close()
	}
	r.open = nil
}

// Refuse makes new connections close at once (on) or be forwarded.
func (r *Relay) Refuse(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused = on
}

// Connections is how many connections the relay forwarded.
func (r *Relay) Connections() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns
}

// Settled waits until the relay has taken a connection and every one it
// took has ended, so that Received holds all their clients sent: for a
// test whose clients have exited, whose last bytes the relay may not
// have read yet.
func (r *Relay) Settled(t testing.TB) {
	t.Helper()
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.conns > 0 && r.ended == r.conns
	}, 10*time.Second, 5*time.Millisecond, "a client connected to the relay, and every connection ended")
}

// Received is every byte clients sent through the relay so far.
func (r *Relay) Received() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.sent.Bytes())
}

// Carried reports whether the bytes clients sent contain s.
func (r *Relay) Carried(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Contains(r.sent.Bytes(), []byte(s))
}

// FreePorts returns n distinct loopback TCP ports that were free a
// moment ago (all held at once, so that they differ), below the kernel's
// ephemeral range: a port of that range, once let go, may become the
// local end of any test's next connection before the process meant to
// listen on it starts (a cluster node failed so: "bind: address already
// in use").
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	below := ephemeralLow()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		require.Less(t, tries, 10000, "no free port in %d-%d", lowestPort, below-1)
		p := lowestPort + rand.IntN(below-lowestPort)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // taken
		}
		defer l.Close()
		ports = append(ports, p)
	}
	return ports
}

// lowestPort is the lowest port natsFreePorts returns.
const lowestPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range), 32768 where it cannot be read or leaves too few
// ports below it.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if lo, err := strconv.Atoi(f[0]); err == nil && lo >= lowestPort+1000 {
			return lo
		}
	}
	return 32768
}

// SyncBuffer is a bytes.Buffer that a process's output (or a logger) and
// a test's reads may use at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Command floorhook is the least a Go hook can do to have a job applied
// through a queue: connect with pinned TLS first (X25519, as scribe's
// clients do on loopback), listen for the job's outcome, publish it
// without asking for its ack (as scribe's Apply does through a local
// daemon), then wait for its outcome. It holds nothing of scribe's;
// BenchmarkFloorHook times it as a process, the floor under `scribe
// submit --wait`.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "floorhook:", err)
		os.Exit(1)
	}
}

func run() error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(os.Getenv("SCRIBE_FLOOR_CERT")))
	nc, err := nats.Connect(os.Getenv("SCRIBE_FLOOR_URL"), nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, CurvePreferences: []tls.CurveID{tls.X25519}}),
		nats.TLSHandshakeFirst(), nats.SyncQueueLen(4), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	id := fmt.Sprintf("hook-%d-%d", os.Getpid(), time.Now().UnixNano())
	sub, err := nc.SubscribeSync("outcomes." + id)
	if err != nil {
		return err
	}
	m := nats.NewMsg("jobs." + id)
	m.Data = []byte(`{"v":1,"id":"` + id + `","ops":[{"op":"append","path":"log.txt","data":"a line\n"}]}`)
	m.Header.Set("Nats-Msg-Id", id)
	if err := nc.PublishMsg(m); err != nil {
		return err
	}
	_, err = sub.NextMsg(10 * time.Second)
	return err
}

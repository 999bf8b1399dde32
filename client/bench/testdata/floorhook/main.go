// Command floorhook is the least a Go hook can do to have a job applied
// through a queue: connect with pinned TLS first (X25519, as scribe's
// clients do on loopback), listen for the job's outcome, publish it
// without asking for its ack (as scribe's Apply does through a local
// daemon), then wait for its outcome. It holds nothing of scribe's;
// BenchmarkFloorHook times it as a process, the floor under `scribe
// submit --wait`.
//
// With SCRIBE_FLOOR_STORE set it sends its job to that store's running
// `scribe serve` instead, as the protocol's docs tell any NATS client to:
// the daemon's URL, credentials and certificate from .scribe/daemon.json,
// a version 1 job on the store's subjects. That is scribe's daemon with
// the least client in front of it.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "floorhook:", err)
		os.Exit(1)
	}
}

// target is where the job goes: a floor server's subjects, or a scribe
// daemon's.
type target struct {
	url, cert, user, password string
	jobs, outcomes, store     string
}

func find() (target, error) {
	store := os.Getenv("SCRIBE_FLOOR_STORE")
	if store == "" {
		return target{url: os.Getenv("SCRIBE_FLOOR_URL"), cert: os.Getenv("SCRIBE_FLOOR_CERT"), jobs: "jobs.", outcomes: "outcomes."}, nil
	}
	b, err := os.ReadFile(filepath.Join(store, ".scribe", "daemon.json"))
	if err != nil {
		return target{}, err
	}
	var d struct {
		URL      string `json:"url"`
		User     string `json:"user"`
		Password string `json:"password"`
		StoreID  string `json:"store_id"`
		TLSCert  string `json:"tls_cert"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return target{}, err
	}
	prefix := "scribe." + d.StoreID
	return target{url: d.URL, cert: d.TLSCert, user: d.User, password: d.Password,
		jobs: prefix + ".jobs", outcomes: prefix + ".outcomes.", store: d.StoreID}, nil
}

func run() error {
	t, err := find()
	if err != nil {
		return err
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
		return err
	}
	defer nc.Close()
	id := fmt.Sprintf("hook-%d-%d", os.Getpid(), time.Now().UnixNano())
	sub, err := nc.SubscribeSync(t.outcomes + id)
	if err != nil {
		return err
	}
	subject, job := "jobs."+id, `{"v":1,"id":"`+id+`","ops":[{"op":"append","path":"log.txt","data":"a line\n"}]}`
	if t.store != "" {
		subject, job = t.jobs, `{"v":1,"id":"`+id+`","store":"`+t.store+`","ops":[{"op":"append","path":"log.txt","data":"a line\n"}]}`
	}
	m := nats.NewMsg(subject)
	m.Data = []byte(job)
	m.Header.Set("Nats-Msg-Id", id)
	if err := nc.PublishMsg(m); err != nil {
		return err
	}
	o, err := sub.NextMsg(10 * time.Second)
	if err != nil || t.store == "" {
		return err
	}
	var out struct {
		Status string `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(o.Data, &out); err != nil {
		return err
	}
	if out.Status != "applied" {
		return fmt.Errorf("job %s %s: %s", id, out.Status, out.Detail)
	}
	return nil
}

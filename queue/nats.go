package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Limits bounds one store's queue.
type Limits struct {
	// MaxJobs is the most jobs queued at once; further Submits fail with
	// ErrQueueFull. 0 means DefaultMaxJobs.
	MaxJobs int64
	// MaxBytes is the most bytes queued at once. 0 means DefaultMaxBytes.
	MaxBytes int64
	// MaxJobBytes is the largest encoded job taken, at most
	// MaxJobBytesLimit. 0 means MaxJobBytes (1 MiB). The NATS server's
	// max payload must allow it (and its headers).
	MaxJobBytes int
	// Replicas is how many servers of a cluster keep the queue: 1, or 3
	// to survive the loss of one. 0 means 1.
	Replicas int
}

// Jobs is l.MaxJobs, or its default.
func (l Limits) Jobs() int64 {
	if l.MaxJobs <= 0 {
		return DefaultMaxJobs
	}
	return l.MaxJobs
}

// Bytes is l.MaxBytes, or its default.
func (l Limits) Bytes() int64 {
	if l.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return l.MaxBytes
}

// JobBytes is l.MaxJobBytes, or its default.
func (l Limits) JobBytes() int {
	if l.MaxJobBytes <= 0 {
		return MaxJobBytes
	}
	return l.MaxJobBytes
}

// Check reports a limit out of range.
func (l Limits) Check() error {
	if l.MaxJobBytes < 0 || l.MaxJobBytes > MaxJobBytesLimit {
		return fmt.Errorf("max job bytes %d: want 1 to %d (JetStream stores messages of up to 32 MiB)", l.MaxJobBytes, MaxJobBytesLimit)
	}
	if l.Replicas < 0 || l.Replicas > 5 {
		return fmt.Errorf("replicas %d: want 1 to 5 (1, or 3 to survive the loss of a server)", l.Replicas)
	}
	return nil
}

// Queue defaults.
const (
	DefaultMaxJobs  = 100_000
	DefaultMaxBytes = 1 << 30
	// DedupeWindow is how long JetStream itself drops a republished job ID.
	// It is only a first line: the journal is the source of truth.
	DedupeWindow = 2 * time.Minute
	// AckWait is how long the writer may hold a job before JetStream
	// redelivers it; the writer extends it while it waits for the lock.
	AckWait = 30 * time.Second
)

// StreamConfig is the JetStream stream of a store: file storage, work-queue
// retention (a job leaves the stream when the writer acks it), new jobs
// refused when full.
func StreamConfig(storeID string, l Limits) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamName(storeID),
		Description: "scribe jobs for store " + storeID,
		Subjects:    []string{JobsSubject(storeID), HighJobsSubject(storeID)},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardNew,
		MaxMsgs:     l.Jobs(),
		MaxBytes:    l.Bytes(),
		MaxMsgSize:  int32(l.JobBytes() + 4096), // headroom for headers
		Duplicates:  DedupeWindow,
		Replicas:    max(l.Replicas, 1),
	}
}

// ConsumerConfig is a durable pull consumer of the store's writer: every
// queued job of one subject in stream order (the stream's only consumer,
// when subject is empty). A work-queue stream requires explicit acks, but
// the writer acks by purging the stream up to the jobs it has decided
// (one synced operation for many jobs, where each ack would be one). Its
// state is kept in memory: the writer recreates it at every start, from
// the oldest job, and the journal recognises jobs already decided.
func ConsumerConfig(name, subject string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       AckWait,
		MaxAckPending: 4096,
		MemoryStorage: true,
	}
}

// CreateConsumer creates (or updates) the consumer ConsumerConfig(name,
// subject) of stream and returns it once it can be pulled from. On a
// cluster a consumer just created may have no leader yet, and a pull
// request that finds none is answered "no responders", which nats.go's
// iterators drop: they pull again only after two missed heartbeats, so
// the writer would see no job of that consumer for 10 s. Its info comes
// from its leader, which then serves pulls.
func CreateConsumer(ctx context.Context, stream jetstream.Stream, name, subject string) (jetstream.Consumer, error) {
	cons, err := stream.CreateOrUpdateConsumer(ctx, ConsumerConfig(name, subject))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, consumerLeaderWait)
	defer cancel()
	for {
		info, err := cons.Info(ctx)
		if err == nil && (info.Cluster == nil || info.Cluster.Leader != "") {
			return cons, nil
		}
		if !Sleep(ctx, 10*time.Millisecond) {
			return nil, fmt.Errorf("consumer %s has no leader yet: %w", name, errors.Join(err, ctx.Err()))
		}
	}
}

// consumerLeaderWait bounds how long CreateConsumer waits for the
// consumer's leader.
const consumerLeaderWait = 10 * time.Second

// ErrNoSpace is returned by CreateStream when JetStream cannot reserve the
// queue's byte limit (Limits.MaxBytes): a file stream reserves its limit
// on disk up front, and a server without a configured store limit lets
// its streams reserve only part of the free space.
var ErrNoSpace = errors.New("not enough disk space to reserve the queue's byte limit")

// jsErrStorageResources is nats-server's JSStorageResourcesExceededErr
// ("insufficient storage resources available").
const jsErrStorageResources = 10047

// CreateStream creates a store's stream (StreamConfig), or updates it to
// the limits l. A byte limit the server cannot reserve fails with
// ErrNoSpace.
func CreateStream(ctx context.Context, js jetstream.JetStream, storeID string, l Limits) (jetstream.Stream, error) {
	cfg := StreamConfig(storeID, l)
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrStorageResources {
		return nil, fmt.Errorf("create stream %s: %w: %d bytes (%w)", cfg.Name, ErrNoSpace, cfg.MaxBytes, err)
	}
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// ErrStreamConflict is returned by VerifyStream for a store's stream whose
// configuration differs from what scribe needs; nothing was changed.
var ErrStreamConflict = errors.New("the store's stream is configured differently")

// VerifyStream is CreateStream for a NATS server that scribe does not own
// (an operator's, a cluster): a missing stream is created; an existing
// one is used only if it is configured as StreamConfig says, and never
// changed: a difference of retention, subjects, storage, discard policy,
// limits or replicas fails with ErrStreamConflict, naming each. (A daemon
// that changed it to its flags would fight another daemon of the store
// started with other flags; the operator decides.) A stream made before
// high jobs had a subject of their own, with JobsSubject alone, is used
// as it is: see HasHighSubject.
func VerifyStream(ctx context.Context, js jetstream.JetStream, storeID string, l Limits) (jetstream.Stream, error) {
	want := StreamConfig(storeID, l)
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // another daemon was faster
			s, err = js.Stream(ctx, want.Name)
		} else if err != nil {
			return nil, fmt.Errorf("create stream %s: %w", want.Name, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", want.Name, err)
	}
	if diff := streamDiff(s.CachedInfo().Config, want); len(diff) > 0 {
		return nil, fmt.Errorf("%w: stream %s has %s; change the stream (nats stream edit) or this daemon's flags to match",
			ErrStreamConflict, want.Name, strings.Join(diff, ", "))
	}
	return s, nil
}

// streamDiff names the settings of have that differ from want, among
// those StreamConfig sets (the description aside).
func streamDiff(have, want jetstream.StreamConfig) []string {
	var d []string
	add := func(name string, h, w any) {
		if fmt.Sprint(h) != fmt.Sprint(w) {
			d = append(d, fmt.Sprintf("%s %v where scribe needs %v", name, h, w))
		}
	}
	if !slices.Equal(have.Subjects, want.Subjects[:1]) { // an older stream's: see HasHighSubject
		add("subjects", have.Subjects, want.Subjects)
	}
	add("retention", have.Retention, want.Retention)
	add("storage", have.Storage, want.Storage)
	add("discard", have.Discard, want.Discard)
	add("max_msgs", have.MaxMsgs, want.MaxMsgs)
	add("max_bytes", have.MaxBytes, want.MaxBytes)
	add("max_msg_size", have.MaxMsgSize, want.MaxMsgSize)
	add("duplicate_window", have.Duplicates, want.Duplicates)
	add("replicas", have.Replicas, want.Replicas)
	return d
}

// HasHighSubject reports whether a store's stream has HighJobsSubject.
// One made by an older version has JobsSubject alone: its writer consumes
// every job through one consumer, and decides the high ones first only
// among the jobs it has taken (a batch's worth); a client's publish of a
// high job, finding no stream on the subject, falls back to JobsSubject.
// nats stream edit adds the subject.
func HasHighSubject(cfg jetstream.StreamConfig, storeID string) bool {
	return slices.Contains(cfg.Subjects, HighJobsSubject(storeID))
}

// jsErrNoPeers is nats-server's JSClusterNoPeersErr ("no suitable peers
// for placement"): a cluster that has just formed, or lost a node, may
// not yet count enough peers online for a replicated stream.
const jsErrNoPeers = 10005

// Transient reports an error of a JetStream request that may pass by
// itself on a cluster: no answer (no meta or stream leader yet, during an
// election), or too few peers online to place a replicated stream. Such
// a request is worth retrying; others are not.
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
		return true
	case errors.As(err, &apiErr):
		return apiErr.ErrorCode == jsErrNoPeers
	}
	return false
}

// Post sends an encoded job on subject, as Publish does, but without
// asking JetStream for its ack: the stream stores it or drops it, and says
// nothing either way (a full queue, a subject no stream takes). It saves
// the ack's round trip for a caller that learns the job's fate from its
// outcome anyway, and that publishes again, with the same ID, if no
// outcome comes (a duplicate then if this copy was stored).
func Post(nc *nats.Conn, storeID, subject, jobID string, data []byte) error {
	return nc.PublishMsg(jobMsg(storeID, subject, jobID, data))
}

// jobMsg is an encoded job as Publish and Post send it: the job ID as
// Nats-Msg-Id, for JetStream's dedupe, and the store's stream as the
// only one that may store it.
func jobMsg(storeID, subject, jobID string, data []byte) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, jobID)
	msg.Header.Set(jetstream.ExpectedStreamHeader, StreamName(storeID))
	return msg
}

// MsgID is the job ID a message names as its Nats-Msg-Id, "" if none;
// false if it names several. The NATS server dedupes by the first such
// line that follows a CRLF, while nats.go also ends a line at a bare LF:
// of several, which one the server took cannot be told, so such a
// message is no job's. With one, the server's value is the same, or
// holds a byte no job ID may (a tab, a line feed).
func MsgID(h nats.Header) (string, bool) {
	switch vs := h.Values(jetstream.MsgIDHeader); len(vs) {
	case 0:
		return "", true
	case 1:
		return vs[0], true
	default:
		return "", false
	}
}

// ErrQueueFull is returned by Publish when the store's queue is at its
// limits; nothing was queued.
var ErrQueueFull = errors.New("queue full")

// Publish queues an encoded job on subject, one of its store's jobs
// subjects (SubjectFor), with the job ID as Nats-Msg-Id and returns once
// JetStream has stored it. dup reports that JetStream already had a job
// with this ID in its dedupe window, under either subject.
func Publish(ctx context.Context, js jetstream.JetStream, storeID, subject, jobID string, data []byte) (dup bool, err error) {
	ack, err := js.PublishMsg(ctx, jobMsg(storeID, subject, jobID, data))
	if err != nil {
		var apiErr *jetstream.APIError
		// 10077 is JSStreamStoreFailed; with DiscardNew it carries
		// "maximum messages exceeded" or "maximum bytes exceeded".
		if errors.As(err, &apiErr) && apiErr.ErrorCode == 10077 && strings.Contains(apiErr.Description, "maximum") {
			return false, fmt.Errorf("%w (%s): job %s was not queued; retrying it is safe once the daemon has applied some of the queued jobs (serve's max_jobs and max_bytes bound the queue)", ErrQueueFull, apiErr.Description, jobID)
		}
		return false, fmt.Errorf("publish job %s: %w", jobID, err)
	}
	return ack.Duplicate, nil
}

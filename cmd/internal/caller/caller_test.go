package caller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
	"github.com/scribehq/scribe/tests/testkit"
	"github.com/scribehq/scribe/writer/lock"
)

// newMain is a command line of this package's commands, stdin given,
// its output recorded.
func newMain(stdin io.Reader) (*cli.Main, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return &cli.Main{Stdin: stdin, Stdout: &out, Stderr: &errOut, Version: "test",
		Commands: []cli.Command{Submit(), Status(), Wait(), Jobs(), Lock(), Stop(), Recover(), cli.HelpCommand(), cli.VersionCommand()},
	}, &out, &errOut
}

// runCLI runs the command line in this process and reports its error as
// main does: stdout, stderr and the exit code.
func runCLI(t *testing.T, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	m, out, errOut := newMain(stdin)
	code = m.Exit(m.Run(t.Context(), args))
	return out.String(), errOut.String(), code
}

// Help that was asked for goes to stdout with exit 0; usage errors go to
// stderr with exit 2, in one line that says where to look.
func TestHelpOnStdout(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the output
		code int
	}{
		{[]string{"submit", "-h"}, "Usage: scribe submit", cli.ExitOK},
		{[]string{"submit", "--help"}, "1 MiB", cli.ExitOK},
		{[]string{"help", "submit"}, "Usage: scribe submit", cli.ExitOK},
		{[]string{"help", "lock"}, "Usage: scribe lock", cli.ExitOK},
		{[]string{"lock", "-h"}, "--wait 10s is --wait=10s", cli.ExitOK},
		{[]string{"help", "status"}, "Usage: scribe status", cli.ExitOK},
		{[]string{"submit", "--bogus"}, "scribe: unknown flag --bogus; see scribe submit --help\n", cli.ExitUsage},
		{[]string{"submit", "--wiat", "put", "f", "x"}, "scribe: unknown flag --wiat (did you mean --wait?); see scribe submit --help\n", cli.ExitUsage},
		{[]string{"lock", "--wait=soon", "--", "true"}, "want true, false or a positive duration", cli.ExitUsage},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := runCLI(t, strings.NewReader(""), tc.args...)
			assert.Equal(t, tc.code, code)
			if tc.code == cli.ExitOK {
				assert.Contains(t, stdout, tc.want)
				assert.Empty(t, stderr)
			} else {
				assert.Contains(t, stderr, tc.want)
				assert.Empty(t, stdout)
			}
		})
	}
}

// A job file's errors name the place in the file and JSON's kinds, not
// Go's types.
func TestJobFileProblem(t *testing.T) {
	for _, tc := range []struct {
		file, want string
	}{
		{`{"ops":[{"op":"put","path":5}]}`, "ops[0].path: want a string, not a number"},
		{`{"ops":[{"op":"put","path":"a"},{"op":"exec","name":"x","args":[1]}]}`, "ops[1].args: want a string, not a number"},
		{`{"ops":[{"op":"put","path":"a","timeout_ms":"soon"}]}`, "ops[0].timeout_ms: want a number, not a string"},
		{`{"id":7,"ops":[]}`, "id: want a string, not a number"},
		{`{"ops":{}}`, "ops: want an array, not an object"},
		{`{"meta":{"by":1}}`, "meta: want a string, not a number"},
		{`[1]`, "want an object, not an array"},
		{`{"submitted":"yesterday"}`, `submitted: want a time such as 2026-01-02T15:04:05Z, not "yesterday"`},
		{`{"ops":[{"op":"put","if_mach":"absent"}]}`, `ops[0]: unknown field "if_mach"`},
		{`{"opz":[]}`, `unknown field "opz"`},
		{"{\n  \"ops\": [\n    {\"op\": \"put\",}\n  ]\n}", "line 3, column 18: invalid character '}' looking for beginning of object key string"},
		{`{"ops":[`, "the JSON ends too soon"},
		{`{"ops":[{"op":"put","data":"a","data_b64":"YQ=="}]}`, "ops[0]: op has both data and data_b64"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var job queue.Job
			dec := jsonDecoder(tc.file)
			err := dec.Decode(&job)
			require.Error(t, err)
			got := jobFileProblem([]byte(tc.file), err)
			assert.Equal(t, tc.want, got)
			assert.NotContains(t, got, "Go ")
			assert.NotContains(t, got, "queue.")
		})
	}
}

// The content of a --job file larger than a job may be is refused for
// what it is, and a stdin larger than that is read only so far: the size
// given is a lower bound.
func TestTooLargeFromStdin(t *testing.T) {
	big := strings.Repeat("x", queue.MaxJobBytesLimit+(1<<20))
	atLeast := fmt.Sprintf("at least %d bytes", queue.MaxJobBytesLimit+1)
	onDisk := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(onDisk, []byte(big), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		file string
		want string
	}{
		{"DATA", []string{"append", "f"}, "", fmt.Sprintf("rejected (too_large): DATA from stdin is %s, more than any job may hold (%d bytes encoded, the most a daemon can take)", atLeast, queue.MaxJobBytesLimit)},
		{"DATA, -", []string{"put", "f", "-"}, "", "rejected (too_large): DATA from stdin is " + atLeast},
		{"job file", nil, "-", "rejected (too_large): the job file from stdin is " + atLeast},
		{"job file on disk", nil, onDisk, "rejected (too_large): the job file " + onDisk + " is " + atLeast},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &submit{&cli.Main{Stdin: strings.NewReader(big)}}
			_, err := c.buildJob(tc.args, jobFlags{file: tc.file})
			require.ErrorIs(t, err, queue.ErrRejected)
			// As it begins: callers (the Python client) read the reason there.
			assert.True(t, strings.HasPrefix(err.Error(), tc.want), err.Error())
			assert.Equal(t, cli.ExitRejected, cli.ExitCode(err))
		})
	}
}

// DATA left out is read from stdin only when stdin is not a terminal: at
// a terminal, it is a usage error that says what to give.
func TestDataAbsentAtATerminal(t *testing.T) {
	_, tty := testkit.OpenPTY(t)
	store := t.TempDir()
	stdout, stderr, code := runCLI(t, tty, "submit", "--store", store, "--route", "direct", "append", "f.txt")
	assert.Equal(t, cli.ExitUsage, code, stderr)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "append f.txt: DATA is missing; give DATA, or - to read it from stdin (stdin is a terminal)")
	assert.NoFileExists(t, filepath.Join(store, "f.txt"))
}

// The lock file shows a direct submit's op and path, never its data.
func TestDescribeJob(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		jobFile string
		want    string
	}{
		{[]string{"append", "notes.txt", "secret\nline"}, "", "scribe submit append notes.txt"},
		{[]string{"put", "f", "-"}, "", "scribe submit put f"},
		{[]string{"delete", "f"}, "", "scribe submit delete f"},
		{[]string{"exec", "mine", "--all"}, "", "scribe submit exec mine"},
		{nil, "job.json", "scribe submit --job job.json"},
		{nil, "", "scribe submit"},
	} {
		assert.Equal(t, tc.want, describeJob(tc.args, tc.jobFile))
	}
}

// A busy store says how to wait, and when the daemon holds it, why: its
// idle-release period, from its discovery file when it is that daemon's.
func TestBusyHint(t *testing.T) {
	store := t.TempDir()
	real, err := queue.ResolveStore(store)
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(queue.Layout{Root: real}.Meta(), 0o700))
	require.NoError(t, os.WriteFile(queue.Layout{Root: real}.Discovery(), []byte(`{"pid":4242,"idle_release_ms":3000}`), 0o600))
	daemonHolder := func(pid int) error {
		return &client.BusyError{Lock: "L", Holder: &queue.Holder{PID: pid, Mode: queue.ModeDaemon}}
	}
	for _, tc := range []struct {
		name   string
		err    error
		direct bool
		lock   bool // scribe lock's hint, not submit's
		want   []string
		absent []string
	}{
		{name: "not busy", err: errors.New("other")},
		{
			name: "unknown holder", err: &lock.LockedError{Path: "L"},
			want: []string{"--wait=DUR"}, absent: []string{"daemon", "bare", "--wait until", "no bound"},
		},
		{
			name: "unknown holder, for lock", err: &lock.LockedError{Path: "L"}, lock: true,
			want: []string{"--wait=DUR"}, absent: []string{"daemon", "until it is free"},
		},
		{
			name: "direct holder", err: &lock.LockedError{Path: "L", Holder: &queue.Holder{PID: 1, Mode: queue.ModeDirect}},
			want: []string{"--wait=DUR"}, absent: []string{"daemon"},
		},
		{
			name: "the daemon, from the lock", err: &lock.LockedError{Path: "L", Holder: &queue.Holder{PID: 4242, Mode: queue.ModeDaemon}},
			want: []string{"idle-release period (3s) after; retry after that", "--wait=DUR"},
		},
		{
			name: "the daemon", err: daemonHolder(4242),
			want: []string{"idle-release period (3s) after; retry after that", "--wait=DUR"}, absent: []string{"--route direct"},
		},
		{
			name: "the daemon, avoided", err: fmt.Errorf("wrapped: %w", daemonHolder(4242)), direct: true,
			want: []string{"(3s)", "without --route direct the job would queue through the daemon"},
		},
		{
			name: "another daemon than the file's", err: daemonHolder(99),
			want: []string{"idle-release period (about 500ms by default)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hint := busyHint(store, tc.err, tc.direct)
			if tc.want == nil {
				assert.Empty(t, hint)
			}
			for _, w := range tc.want {
				assert.Contains(t, hint, w)
			}
			for _, a := range tc.absent {
				assert.NotContains(t, hint, a)
			}
		})
	}
}

// A submit interrupted by a signal exits 130 and names the job to look
// for, unless it was never sent.
func TestSubmitInterrupted(t *testing.T) {
	sig, cancel := context.WithCancel(context.Background())
	cancel()
	job := &queue.Job{ID: "job-7"}
	c := &submit{&cli.Main{}}
	for _, tc := range []struct {
		name string
		err  error
		job  *queue.Job
		want string
	}{
		{"before sending", context.Canceled, nil, "interrupted before the job was sent: nothing was queued or written"},
		{"waiting for the outcome", context.Canceled, job, "interrupted: job job-7 may still be applied; see its outcome with: scribe status --store /s job-7 (or wait for it: scribe wait --store /s job-7)"},
		{"waiting for the lock", &client.BusyError{Lock: "L"}, job, "interrupted while waiting for the store lock: job job-7 was not written"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.failed(sig, tc.err, client.RoutePrefer, "/s", tc.job)
			assert.Equal(t, cli.ExitInterrupted, cli.ExitCode(err))
			assert.Equal(t, tc.want, err.Error())
		})
	}
	// Without a signal, a wait that ran out is 75, as ever.
	err := c.failed(context.Background(), context.DeadlineExceeded, client.RoutePrefer, "/s", job)
	assert.Equal(t, cli.ExitBusy, cli.ExitCode(err))
}

// jsonDecoder decodes s as submit decodes a job file.
func jsonDecoder(s string) *json.Decoder {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	return dec
}

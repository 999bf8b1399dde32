package caller

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/client"
	"github.com/scribehq/scribe/cmd/internal/cli"
	"github.com/scribehq/scribe/queue"
)

func TestBuildJob(t *testing.T) {
	dir := t.TempDir()
	jobFile := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	execJob := jobFile("exec.json", `{"ops":[{"op":"exec","name":"reindex","args":["a"]}]}`)
	putJob := jobFile("put.json", `{"ops":[{"op":"put","path":"f","data":"x"}]}`)
	for _, tc := range []struct {
		name     string
		args     []string
		jobFile  string
		ifMatch  string
		coalesce string
		newline  bool
		stdin    string
		want     *queue.Job
		usage    string // a usage error containing this
		rejected string // the job is built, and queue validation rejects it with this
	}{
		{
			name: "exec",
			args: []string{"exec", "reindex"},
			want: &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpExec, Name: "reindex"}}},
		},
		{
			name: "exec arguments verbatim",
			args: []string{"exec", "reindex", "-n", "--wait", "--", "a b", ""},
			want: &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpExec, Name: "reindex", Args: []string{"-n", "--wait", "--", "a b", ""}}}},
		},
		{
			name:     "exec coalescing",
			args:     []string{"exec", "reindex", "notes"},
			coalesce: "reindex-all",
			want:     &queue.Job{V: queue.Version, Coalesce: "reindex-all", Ops: []queue.Op{{Kind: queue.OpExec, Name: "reindex", Args: []string{"notes"}}}},
		},
		{
			name:     "exec job file coalescing",
			jobFile:  execJob,
			coalesce: "k",
			want:     &queue.Job{Coalesce: "k", Ops: []queue.Op{{Kind: queue.OpExec, Name: "reindex", Args: []string{"a"}}}},
		},
		{
			name: "put",
			args: []string{"put", "f.txt", "x"},
			want: &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpPut, Path: "f.txt", Data: []byte("x")}}},
		},
		{name: "exec without a name", args: []string{"exec"}, usage: "want exec NAME [ARGS...]"},
		{name: "exec with if-match", args: []string{"exec", "reindex"}, ifMatch: "absent", usage: "--if-match is for file ops"},
		{name: "coalescing a file op", args: []string{"put", "f.txt", "x"}, coalesce: "k", usage: "--coalesce is for exec jobs only"},
		{name: "coalescing a file job", jobFile: putJob, coalesce: "k", rejected: "rejected (bad_input): a coalescing key is for exec jobs only"},
		{name: "a bad command name", args: []string{"exec", "-reindex"}, rejected: `rejected (bad_input): op 0: exec command name "-reindex"`},
		{name: "no arguments", usage: "want OP PATH [DATA|-] or exec NAME [ARGS...], got 0 arguments"},
		{name: "unknown op", args: []string{"frob", "x", "y"}, usage: `unknown op "frob": want put, append, merge, delete or exec`},
		{name: "a duration as OP", args: []string{"10s", "append", "x"}, usage: `unknown op "10s"`},
		{
			name: "leading ./ dropped",
			args: []string{"put", "./notes.txt", "x"},
			want: &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpPut, Path: "notes.txt", Data: []byte("x")}}},
		},
		{name: "inner ./ kept, and rejected", args: []string{"put", "a/./b", "x"}, rejected: "use a path relative to the store"},
		{name: "absolute path rejected", args: []string{"put", "/etc/passwd", "x"}, rejected: "rejected (path_escapes): op 0: path \"/etc/passwd\" is absolute; use a path relative to the store"},
		{
			name: "newline added", args: []string{"append", "f", "a line"}, newline: true,
			want: &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "f", Data: []byte("a line\n")}}},
		},
		{
			name: "newline not doubled", args: []string{"append", "f", "a line\n"}, newline: true,
			want: &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "f", Data: []byte("a line\n")}}},
		},
		{
			name: "newline on empty data", args: []string{"append", "f", ""}, newline: true,
			want: &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "f", Data: []byte("\n")}}},
		},
		{
			name: "newline on stdin data", args: []string{"put", "f", "-"}, newline: true, stdin: "from stdin",
			want: &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpPut, Path: "f", Data: []byte("from stdin\n")}}},
		},
		{
			name: "absent DATA from a pipe", args: []string{"append", "f"}, stdin: "piped",
			want: &queue.Job{V: queue.Version, Ops: []queue.Op{{Kind: queue.OpAppend, Path: "f", Data: []byte("piped")}}},
		},
		{name: "newline with delete", args: []string{"delete", "f"}, newline: true, usage: "--newline is for DATA"},
		{name: "newline with exec", args: []string{"exec", "reindex"}, newline: true, usage: "--newline is for DATA"},
		{name: "newline with a job file", jobFile: putJob, newline: true, usage: "--newline applies to DATA"},
		{name: "job file of the wrong type", jobFile: jobFile("typed.json", `{"ops":[{"op":"put","path":"a","data":"x"},{"op":"put","path":5}]}`), rejected: "job file is not a valid job: ops[1].path: want a string, not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &submit{&cli.Main{Stdin: strings.NewReader(tc.stdin)}}
			job, err := c.buildJob(tc.args, jobFlags{file: tc.jobFile, ifMatch: tc.ifMatch, coalesce: tc.coalesce, newline: tc.newline})
			if tc.usage != "" {
				require.Error(t, err)
				assert.Equal(t, cli.ExitUsage, cli.ExitCode(err))
				assert.Contains(t, err.Error(), tc.usage)
				return
			}
			if err != nil && tc.rejected != "" {
				assert.Contains(t, err.Error(), tc.rejected)
				assert.Equal(t, cli.ExitRejected, cli.ExitCode(submitError(err, client.RoutePrefer)))
				return
			}
			require.NoError(t, err)
			if tc.want != nil {
				assert.Equal(t, tc.want, job)
			}
			job.ID, job.Store = "job-1", queue.StoreID("/s") // as the client prepares it
			_, err = queue.Encode(job)
			if tc.rejected == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.rejected)
			assert.Equal(t, cli.ExitRejected, cli.ExitCode(submitError(err, client.RoutePrefer)))
		})
	}
}

// Without a daemon an exec job is refused before anything is done: exit
// 69, with the CLI's way out; a bad coalescing key is the caller's error.
func TestSubmitExecWithoutDaemon(t *testing.T) {
	t.Setenv("SCRIBE_AUTOSTART", "")
	t.Setenv("SCRIBE_ROUTE", "")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{
			name: "prefer",
			args: []string{"exec", "reindex", "--wait"},
			code: cli.ExitNoDaemon,
			want: []string{"no daemon serves this store: exec jobs run in the daemon, which has the allowlist; start scribe serve, or use --autostart (or SCRIBE_AUTOSTART=1)"},
		},
		{
			name: "direct",
			args: []string{"--route", "direct", "--wait", "exec", "reindex"},
			code: cli.ExitNoDaemon,
			want: []string{": the direct route does not use the daemon, and exec jobs run in the daemon, which has the allowlist; submit it without --route direct, with scribe serve running or --autostart\n"},
		},
		{
			name: "require",
			args: []string{"--route", "require", "exec", "reindex"},
			code: cli.ExitNoDaemon,
		},
		{
			name: "coalescing a file op",
			args: []string{"--coalesce", "k", "append", "f.txt", "x"},
			code: cli.ExitUsage,
			want: []string{"--coalesce is for exec jobs only"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := t.TempDir()
			stdout, stderr, code := runCLI(t, strings.NewReader(""), append([]string{"submit", "--store", store}, tc.args...)...)
			assert.Equal(t, tc.code, code, stderr)
			assert.Empty(t, stdout)
			for _, w := range tc.want {
				assert.Contains(t, stderr, w)
			}
			assert.NoFileExists(t, queue.Layout{Root: store}.Journal(), "nothing was done")
			assert.NoFileExists(t, queue.Layout{Root: store}.Lock())
		})
	}
}

// An exec job's outcome reads as the command's own output.
func TestWriteExecOutput(t *testing.T) {
	for _, tc := range []struct {
		name           string
		exec           queue.ExecResult
		stdout, stderr string
	}{
		{name: "both streams", exec: queue.ExecResult{Stdout: "out\n", Stderr: "err\n"}, stdout: "out\n", stderr: "err\n"},
		{name: "none", exec: queue.ExecResult{}, stdout: "", stderr: ""},
		{
			name:   "cut",
			exec:   queue.ExecResult{Stdout: "start…end", StdoutCut: 100, Stderr: "e", StderrCut: 7},
			stdout: "start…end",
			stderr: "e" + "scribe: job j1: 100 bytes cut from the middle of the command's stdout (its max_output)\n" +
				"scribe: job j1: 7 bytes cut from the middle of the command's stderr (its max_output)\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			c := &submit{&cli.Main{Stdout: &stdout, Stderr: &stderr}}
			c.writeExecOutput(&queue.Outcome{ID: "j1", Status: queue.StatusApplied, Exec: &tc.exec})
			assert.Equal(t, tc.stdout, stdout.String())
			assert.Equal(t, tc.stderr, stderr.String())
		})
	}
}

func TestStatusReportLines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status client.StoreStatus
		want   []string
		absent []string
	}{
		{name: "idle", absent: []string{"running:", "deferred:", "writer waiting:"}},
		{
			name:   "exec",
			status: client.StoreStatus{Running: cli.Ptr("job j1: reindex, for 2s"), Deferred: cli.Ptr("job j2: lock /x/tool.lock is held")},
			want:   []string{"\nrunning: job j1: reindex, for 2s\n", "\ndeferred: job j2: lock /x/tool.lock is held\n"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			tc.status.Lock.State = client.LockFree
			(&status{&cli.Main{Stdout: &stdout}}).printStatus(&tc.status)
			for _, w := range tc.want {
				assert.Contains(t, stdout.String(), w)
			}
			for _, a := range tc.absent {
				assert.NotContains(t, stdout.String(), a)
			}
		})
	}
}

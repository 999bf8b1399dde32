package queue_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

func TestStoreID(t *testing.T) {
	tests := []string{"/", "/srv/store", "/srv/store2", "/tmp/é"}
	hexID := regexp.MustCompile(`^[0-9a-f]{16}$`)
	seen := map[string]string{}
	for _, p := range tests {
		t.Run(p, func(t *testing.T) {
			id := queue.StoreID(p)
			assert.Regexp(t, hexID, id)
			assert.Equal(t, id, queue.StoreID(p), "stable")
			sum := sha256.Sum256([]byte(p))
			assert.Equal(t, hex.EncodeToString(sum[:8]), id)
			if other, ok := seen[id]; ok {
				t.Errorf("%s and %s share store ID %s", p, other, id)
			}
			seen[id] = p
		})
	}
}

func TestResolveStore(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	real := filepath.Join(base, "store")
	require.NoError(t, os.Mkdir(real, 0o755))
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(real, link))
	linkToLink := filepath.Join(base, "link2")
	require.NoError(t, os.Symlink("link", linkToLink))
	t.Chdir(base)

	tests := []struct{ name, dir string }{
		{"real", real},
		{"trailing slash", real + "/"},
		{"unclean", filepath.Join(base, "store") + "/./"},
		{"symlink", link},
		{"symlink to symlink", linkToLink},
		{"symlink trailing slash", link + "/"},
		{"relative", "store"},
		{"relative dot", "./store/"},
		{"relative symlink", "link"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := queue.ResolveStore(tt.dir)
			require.NoError(t, err)
			assert.Equal(t, real, got)
			assert.Equal(t, queue.StoreID(real), queue.StoreID(got))
		})
	}
}

func TestResolveStoreMissing(t *testing.T) {
	_, err := queue.ResolveStore(filepath.Join(t.TempDir(), "nope"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestSubjects(t *testing.T) {
	id := queue.StoreID("/srv/store")
	tests := []struct{ got, want string }{
		{queue.JobsSubject(id), "scribe." + id + ".jobs"},
		{queue.HighJobsSubject(id), "scribe." + id + ".jobs.high"},
		{queue.SubjectFor(id, queue.PriorityHigh), "scribe." + id + ".jobs.high"},
		{queue.SubjectFor(id, queue.PriorityNormal), "scribe." + id + ".jobs"},
		{queue.OutcomeSubject(id, "job-1"), "scribe." + id + ".outcomes.job-1"},
		{queue.StatusSubject(id), "scribe." + id + ".status"},
		{queue.CancelSubject(id), "scribe." + id + ".cancel"},
		{queue.StreamName(id), "SCRIBE_" + id},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.got)
	}
	cfg := queue.StreamConfig(id, queue.Limits{})
	assert.Equal(t, []string{queue.JobsSubject(id), queue.HighJobsSubject(id)}, cfg.Subjects)
	assert.True(t, queue.HasHighSubject(cfg, id))
	cfg.Subjects = cfg.Subjects[:1] // a stream of an older version
	assert.False(t, queue.HasHighSubject(cfg, id))
	assert.EqualValues(t, queue.DefaultMaxJobs, cfg.MaxMsgs)
	assert.EqualValues(t, queue.DefaultMaxBytes, cfg.MaxBytes)
	assert.Greater(t, cfg.MaxMsgSize, int32(queue.MaxJobBytes))
}

package lock_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/writer/lock"
)

// ProcessStart reads this process's start: before now, and not long ago.
func TestProcessStart(t *testing.T) {
	started, err := lock.ProcessStart(os.Getpid())
	require.NoError(t, err)
	assert.False(t, started.After(time.Now()), "started %s", started)
	assert.WithinDuration(t, time.Now(), started, 10*time.Minute)
	_, err = lock.ProcessStart(1 << 30)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

package queue_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

func FuzzDecode(f *testing.F) {
	seeds := []string{
		`{"v":1,"id":"j1","store":"0123456789abcdef","ops":[{"op":"put","path":"a","data":"x"}]}`,
		`{"v":1,"id":"j1","store":"s","ops":[{"op":"append","path":"d/b","data_b64":"/wA=","if_match":"absent"}]}`,
		`{"v":1,"id":"j1","store":"s","ops":[{"op":"merge","path":"c.json","data":"{\"a\":null}","if_match":"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}]}`,
		`{"v":1,"id":"j1","store":"s","ops":[{"op":"delete","path":"x"}],"meta":{"k":"v"},"submitted":"2024-01-02T03:04:05+01:00"}`,
		`{"v":1,"id":"j1","store":"s","ops":[{"op":"exec","name":"mine","args":["a",""],"dir":"d","timeout_ms":90}],"coalesce":"k"}`,
		`{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"a","data":""}],"meta":{}}`,
		`{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"a","data":"\u0001\ud800"}]}`,
		`{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"a","data":"x","data_b64":"eA=="}]}`,
		`{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":"../a"}]}`,
		`{"v":1,"id":"j1","store":"s","ops":[{"op":"put","path":".scribe/lock"}]}`,
		`{"v":2,"id":"j1","store":"s","ops":[]}`,
		"{\"v\":2,\"id\":\"j1\",\"store\":\"s\",\"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data_len\":3},{\"op\":\"append\",\"path\":\"b\",\"data_len\":0}]}\n\x00\n\xff",
		"{\"v\":2,\"id\":\"j1\",\"store\":\"s\",\"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data_len\":3}]}\nab",
		"{\"v\":1,\"id\":\"j1\",\"store\":\"s\",\"ops\":[{\"op\":\"put\",\"path\":\"a\",\"data_len\":1}]}\nx",
		`{"v":1,"id":"j1","ops":[{"op":`,
		`{"ID":"j1","V":1,"Store":"s","Ops":[{"OP":"put","PATH":"a"}]}`,
		`[]`,
		`null`,
		``,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := queue.Decode(b)
		require.NotNil(t, j)
		if err != nil {
			var rej *queue.RejectError
			require.ErrorAs(t, err, &rej)
			require.ErrorIs(t, err, queue.ErrRejected)
			if j.ID != "" {
				assert.True(t, queue.ValidID(j.ID), "salvaged ID %q", j.ID)
			}
			return
		}
		require.NoError(t, j.Validate())
		enc, err := queue.Encode(j)
		var rej *queue.RejectError
		if errors.As(err, &rej) && rej.Reason == queue.ReasonTooLarge {
			return // data that travels escaped can outgrow the limit
		}
		require.NoError(t, err)
		back, err := queue.Decode(enc)
		require.NoError(t, err)
		assert.Equal(t, j.ID, back.ID)
		assert.Equal(t, j.Store, back.Store)
		assert.Equal(t, j.Ops, back.Ops)
		assert.True(t, maps.Equal(j.Meta, back.Meta), "meta %v != %v", j.Meta, back.Meta)
		assert.True(t, j.Submitted.Equal(back.Submitted), "submitted %v != %v", j.Submitted, back.Submitted)
		again, err := queue.Encode(back)
		require.NoError(t, err)
		assert.Equal(t, string(enc), string(again), "encoding is a fixed point")
		header, _, _ := bytes.Cut(enc, []byte("\n"))
		assert.True(t, json.Valid(header), "the JSON value of %q", enc)
	})
}

func FuzzCheckPath(f *testing.F) {
	seeds := []string{
		"a", "a/b/c.txt", ".x", "..", "../a", "a/..", "./a", "a/./b", "a//b", "a/", "/a",
		`a\b`, "a\x00b", "\x7f", ".scribe", ".scribe/lock", ".SCRIBE/x", "a/.scribe",
		".a.scribe-tmp", "x/.A.SCRIBE-TMP", "é/ü", "\xff\xfe", strings.Repeat("a", 300),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	root := filepath.FromSlash("/srv/store")
	f.Fuzz(func(t *testing.T, p string) {
		if queue.CheckPath(p) != nil {
			return
		}
		assert.True(t, filepath.IsLocal(p), "accepted %q is not local", p)
		assert.Equal(t, p, filepath.Clean(p), "accepted %q is not clean", p)
		joined := filepath.Join(root, p)
		assert.True(t, strings.HasPrefix(joined, root+string(filepath.Separator)), "%q joins to %q", p, joined)
		rel, err := filepath.Rel(root, joined)
		require.NoError(t, err)
		assert.Equal(t, p, filepath.ToSlash(rel))
		segs := strings.Split(p, "/")
		assert.False(t, strings.EqualFold(segs[0], queue.MetaDir), "accepted %q is inside %s", p, queue.MetaDir)
		assert.False(t, strings.HasSuffix(strings.ToLower(segs[len(segs)-1]), ".scribe-tmp"), "accepted %q names a temp file", p)
		assert.NotContains(t, p, "\x00")
		assert.LessOrEqual(t, len(p), queue.MaxPathLen)
	})
}

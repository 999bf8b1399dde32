package config

import (
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"

	"github.com/scribehq/scribe/writer/exec"
)

// scanLines finds each key and table where it is first set or opened,
// and each table of an array of tables with the keys set in it; a value's
// content is never taken for a key or a header.
func TestScanLines(t *testing.T) {
	doc := `top = 1
"quoted key" = 2
s = """
fake = 3
[[store]]
"""
a = [
  [1, 2],
  "x = 4",
]
[exec.mine]
program = 'p' # a comment = 5
env.A = "1"
[exec . "my.tool"]
timeout = "1s"
[[store]]
path = "a"
lock_file = "l"
[[ store ]]
# path = "no"
path = """
[[store]]
path = 9
"""
[[list]]
item = 1
[[store]
path = "a broken header: not a table of the array"
`
	tl := scanLines(doc)
	for _, tc := range []struct {
		key  toml.Key
		line int
	}{
		{toml.Key{"top"}, 1},
		{toml.Key{"quoted key"}, 2},
		{toml.Key{"s"}, 3},
		{toml.Key{"a"}, 7},
		{toml.Key{"exec"}, 11},
		{toml.Key{"exec", "mine"}, 11},
		{toml.Key{"exec", "mine", "program"}, 12},
		{toml.Key{"exec", "mine", "env"}, 13},
		{toml.Key{"exec", "mine", "env", "A"}, 13},
		{toml.Key{"exec", "my.tool"}, 14},
		{toml.Key{"exec", "my.tool", "timeout"}, 15},
		{toml.Key{"store"}, 16},
		{toml.Key{"store", "path"}, 17},
		{toml.Key{"list", "item"}, 26},
	} {
		assert.Equal(t, tc.line, exec.LineOf(tl.keys, tc.key...), tc.key.String())
	}
	for _, k := range []string{"fake", "x", "1"} {
		assert.NotContains(t, tl.keys, k, "a value's content is not a key")
	}
	assert.Equal(t, []map[string]int{{"": 16, "path": 17, "lock_file": 18}, {"": 19, "path": 21}}, tl.arrays["store"])
	assert.Equal(t, []map[string]int{{"": 25, "item": 26}}, tl.arrays["list"])
	assert.Len(t, tl.arrays, 2)
}

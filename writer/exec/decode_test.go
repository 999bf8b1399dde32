package exec

import (
	"regexp"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTOMLString(t *testing.T) {
	for _, s := range []string{"", "plain", `back\slash "quoted"`, "tab\tnew\nline\r", "ctl\x01\x7f", "ünï ☃", `'[a-z]+\.log'`} {
		var v struct{ S string }
		_, err := toml.Decode("S = "+tomlString(s), &v)
		require.NoError(t, err, tomlString(s))
		assert.Equal(t, s, v.S)
	}
	assert.Regexp(t, regexp.MustCompile(`^\[\]$`), tomlStrings(nil))
}

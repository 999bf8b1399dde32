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

// envName is the POSIX rule, [A-Za-z_][A-Za-z0-9_]*, as the regexp it
// stands for says it.
func TestEnvName(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	for _, s := range []string{"", "_", "A", "a1", "A_B9", "1A", "9", "A-B", "A B", "é", "A\x00", "_1", "Z", "z", "[", "`", "@"} {
		assert.Equal(t, re.MatchString(s), envName(s), "%q", s)
	}
}

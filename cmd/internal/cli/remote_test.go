package cli

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/scribehq/scribe/queue"
)

// clearNATSEnv unsets the variables the connection flags default to, for
// the test.
func clearNATSEnv(t *testing.T) {
	t.Helper()
	for _, name := range []string{queue.EnvNATSURL, queue.EnvNATSCreds, queue.EnvNATSUser, queue.EnvNATSPassword, queue.EnvNATSToken,
		queue.EnvNATSNKey, queue.EnvNATSCA, queue.EnvNATSCert, queue.EnvNATSKey, queue.EnvStoreID} {
		t.Setenv(name, "") // restored at cleanup
		require.NoError(t, os.Unsetenv(name))
	}
}

// Each connection flag defaults to its variable; a flag beats its
// variable, and a way to authenticate given as a flag replaces another
// one the environment sets rather than contradicting it.
func TestNATSFlagsFromEnvAndFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want queue.Remote
		id   string
	}{
		{"nothing", nil, nil, queue.Remote{}, ""},
		{"environment",
			map[string]string{queue.EnvNATSURL: "nats://a:4222", queue.EnvNATSUser: "u", queue.EnvNATSPassword: "p", queue.EnvNATSCA: "ca.pem",
				queue.EnvNATSCert: "c.pem", queue.EnvNATSKey: "k.pem", queue.EnvStoreID: "0123456789abcdef"},
			nil,
			queue.Remote{URL: "nats://a:4222", User: "u", Password: "p", CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}, "0123456789abcdef"},
		{"flags beat variables",
			map[string]string{queue.EnvNATSURL: "nats://a:4222", queue.EnvNATSCA: "ca.pem", queue.EnvStoreID: "0123456789abcdef"},
			[]string{"--nats-url", "tls://b:4222", "--tls-ca", "other.pem", "--store-id", "fedcba9876543210"},
			queue.Remote{URL: "tls://b:4222", CA: "other.pem"}, "fedcba9876543210"},
		{"a flag's way to authenticate replaces the environment's",
			map[string]string{queue.EnvNATSURL: "nats://a:4222", queue.EnvNATSUser: "u", queue.EnvNATSPassword: "p", queue.EnvNATSToken: "t"},
			[]string{"--creds", "me.creds"},
			queue.Remote{URL: "nats://a:4222", Creds: "me.creds"}, ""},
		{"the environment's password goes with a flag's user",
			map[string]string{queue.EnvNATSPassword: "p", queue.EnvNATSNKey: "seed.nk"},
			[]string{"--user", "u"},
			queue.Remote{User: "u", Password: "p"}, ""},
		{"two ways on the command line stay, for Check to refuse",
			map[string]string{queue.EnvNATSNKey: "seed.nk"},
			[]string{"--token", "t", "--creds", "me.creds"},
			queue.Remote{Token: "t", Creds: "me.creds"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearNATSEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := NewFlagSet("x")
			nf := fs.Remote()
			require.NoError(t, fs.Parse(tc.args))
			r, ok := nf.remote()
			assert.Equal(t, tc.want.URL != "", ok)
			if ok {
				assert.Equal(t, tc.want, r)
			}
			assert.Equal(t, tc.want, nf.Remote)
			assert.Equal(t, tc.id, nf.StoreID)
		})
	}
}

// serve takes the connection flags alone; the help shows neither a
// password nor a token from the environment.
func TestNATSFlagsRegisterConn(t *testing.T) {
	clearNATSEnv(t)
	t.Setenv(queue.EnvNATSPassword, "hunter2")
	t.Setenv(queue.EnvNATSToken, "s3cret")
	t.Setenv(queue.EnvNATSURL, "nats://a:4222")
	fs := NewFlagSet("serve")
	fs.RemoteConn()
	assert.Nil(t, fs.Lookup("store-id"))
	for _, name := range []string{"nats-url", "creds", "user", "password", "token", "nkey", "tls-ca", "tls-cert", "tls-key", "tls-first"} {
		assert.NotNil(t, fs.Lookup(name), name)
	}
	var help strings.Builder
	fs.WriteUsages(&help)
	assert.Contains(t, help.String(), "nats://a:4222")
	assert.NotContains(t, help.String(), "hunter2")
	assert.NotContains(t, help.String(), "s3cret")
	assert.Contains(t, help.String(), "a flag shows in ps")

	// The same definitions, on the standard flag package (serve's, for now).
	gfs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var q queue.Remote
	RemoteConnGo(gfs, &q)
	help.Reset()
	gfs.SetOutput(&help)
	gfs.PrintDefaults()
	assert.Contains(t, help.String(), "nats://a:4222")
	assert.NotContains(t, help.String(), "hunter2")
	n := 0
	gfs.VisitAll(func(*flag.Flag) { n++ })
	assert.Equal(t, 10, n)
	require.NoError(t, gfs.Parse([]string{"--token", "t", "--tls-first"}))
	assert.Equal(t, queue.Remote{URL: "nats://a:4222", Token: "t", TLSFirst: true}, q, "the flag's token replaces the environment's password")
}

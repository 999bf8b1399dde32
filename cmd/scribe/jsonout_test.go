package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJSONAsked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--json"}, true},
		{[]string{"-json"}, true},
		{[]string{"--store", "s", "job", "--json"}, true},
		{[]string{"--json=true"}, true},
		{[]string{"--json=false"}, false},
		{[]string{"--json=maybe"}, true}, // a usage error, answered in JSON
		{[]string{"--", "--json"}, false},
		{[]string{"json"}, false},
		{[]string{"--jsonl"}, false},
	} {
		assert.Equal(t, tc.want, jsonAsked(tc.args), "%q", tc.args)
	}
}

// With --json, a command that fails before printing prints {"error"}; one
// that printed, or succeeded, or was asked for help, gets nothing more.
func TestGuardJSON(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		run       func(m *Main) error
		wantError string // "" : stdout is what run printed
	}{
		{"failure", []string{"--json"}, func(*Main) error { return errors.New("store s does not exist") }, "store s does not exist"},
		{"bad flag", []string{"--json", "--bogus"}, func(m *Main) error {
			return parse(m.newFlagSet("x", ""), []string{"--bogus"})
		}, "flag provided but not defined: -bogus"},
		{"usage error", []string{"--json"}, func(*Main) error { return usageError("want one JOB_ID") }, "want one JOB_ID"},
		{"printed, then failed", []string{"--json"}, func(m *Main) error {
			_ = writeJSON(m.Stdout, map[string]string{"id": "j"})
			return errors.New("no outcome")
		}, ""},
		{"help", []string{"--json", "-h"}, func(*Main) error { return &exitError{code: exitOK} }, ""},
		{"no --json", nil, func(*Main) error { return errors.New("plain") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			m := &Main{Stdout: &stdout, Stderr: &stderr}
			err := m.guardJSON(tc.args, tc.run)
			require.Error(t, err)
			if tc.wantError == "" {
				assert.NotContains(t, stdout.String(), `"error"`)
				return
			}
			var f jsonFailure
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &f), stdout.String())
			assert.Equal(t, tc.wantError, f.Error)
		})
	}
}

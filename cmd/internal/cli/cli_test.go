package cli

import (
	"bytes"
	"strings"
	"testing"
)

func runCapture(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// assertOneCleanLine checks that stderr is exactly one line starting with
// prefix and carries no panic or stack trace.
func assertOneCleanLine(t *testing.T, stderr, prefix string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("stderr is not exactly one line: %q", stderr)
	}
	if !strings.HasPrefix(stderr, prefix) {
		t.Errorf("stderr = %q, want prefix %q", stderr, prefix)
	}
	for _, bad := range []string{"goroutine", "panic"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("stderr contains %q: %q", bad, stderr)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--bogus"},
		{"dev", "--bogus"},
		{"dev", "--nodes", "many"},
		{"dev", "--nodes", "0"},
		{"dev", "--nodes=-2"},
		{"dev", "extra"},
		{"dev", "--nodes", "10"},
		{"dev", "--log-level", "loud"},
		{"agent"},
		{"agent", "--in-memory", "--cluster-size", "0"},
		{"agent", "--in-memory", "--priority", "15"},
		{"agent", "--in-memory", "--priority", "high"},
		{"agent", "--in-memory", "--psk-file", "/nonexistent/psk"},
		{"agent", "--in-memory", "--api-token-file", "/nonexistent/token"},
		{"agent", "--in-memory", "--peers", "/ip4/127.0.0.1/tcp/1"},
		{"agent", "--in-memory", "--listen", "not-a-multiaddr", "--api", ""},
		{"agent", "--in-memory", "--api", "127.0.0.1:0"},
		{"agent", "--in-memory", "--api", "10.1.2.3:7000", "--api-token-file", "/dev/null"},
		{"agent", "--in-memory", "--allow", "not-a-peer-id"},
		{"id"},
		{"version", "extra"},
		{"frobnicate"},
		{},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := runCapture(t, args...)
			if code != ExitUsage {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, ExitUsage, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want empty", stdout)
			}
			assertOneCleanLine(t, stderr, "sluice: ")
		})
	}
}

func TestVersion(t *testing.T) {
	code, stdout, stderr := runCapture(t, "version")
	if code != ExitOK {
		t.Errorf("exit code = %d, want %d", code, ExitOK)
	}
	if stdout != "sluice dev-build\n" {
		t.Errorf("stdout = %q, want %q", stdout, "sluice dev-build\n")
	}
	if stderr != "" {
		t.Errorf("stderr = %q, want empty", stderr)
	}
}

func TestHelp(t *testing.T) {
	code, stdout, _ := runCapture(t, "--help")
	if code != ExitOK {
		t.Errorf("exit code = %d, want %d", code, ExitOK)
	}
	if !strings.Contains(stdout, "dev") || !strings.Contains(stdout, "version") {
		t.Errorf("help does not list the subcommands:\n%s", stdout)
	}
}

package cli

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/core/mutation"
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
		{"agent", "--in-memory", "--cluster-size=-1"},
		{"agent", "--in-memory", "--data", "/nonexistent/data"},
		{"agent", "--in-memory", "--join", "--initial-members", "12D3KooWGzBf5jqxwWSiUrYC2L8t2PMJrcxZ4XQQ4cVhWjGKAAXz"},
		{"agent", "--in-memory", "--initial-members", "not-a-peer-id"},
		{"agent", "--in-memory", "--initial-members", "12D3KooWGzBf5jqxwWSiUrYC2L8t2PMJrcxZ4XQQ4cVhWjGKAAXz"},
		{"agent", "--in-memory", "--election-timeout=-1s"},
		{"agent", "--in-memory", "--priority", "15"},
		{"agent", "--in-memory", "--priority", "high"},
		{"agent", "--in-memory", "--hold-codec", "2"},
		{"agent", "--in-memory", "--hold-codec", "5"},
		{"agent", "--in-memory", "--hold-codec", "four"},
		{"agent", "--in-memory", "--memory-target", "lots"},
		{"agent", "--in-memory", "--memory-target=-1MiB"},
		{"agent", "--in-memory", "--psk-file", "/nonexistent/psk"},
		{"agent", "--in-memory", "--api-token-file", "/nonexistent/token"},
		{"agent", "--in-memory", "--peers", "/ip4/127.0.0.1/tcp/1"},
		{"agent", "--in-memory", "--listen", "not-a-multiaddr", "--api", ""},
		{"agent", "--in-memory", "--api", "127.0.0.1:0"},
		{"agent", "--in-memory", "--api", "10.1.2.3:7000", "--api-token-file", "/dev/null"},
		{"agent", "--in-memory", "--allow", "not-a-peer-id"},
		{"agent", "--data", "/nonexistent/data", "--key-file", "/nonexistent/identity.key"},
		{"agent", "--in-memory", "--key-file", "/nonexistent/identity.key"},
		{"agent", "--in-memory", "--key-file", "/dev/null"},
		{"agent", "--in-memory", "--cpu-profile", "/nonexistent/cpu.pprof"},
		{"proxy", "--upstream", "http://127.0.0.1:1", "--path-levels=-1"},
		{"proxy", "--upstream", "http://127.0.0.1:1", "--path-levels", "32"},
		{"proxy", "--upstream", "http://127.0.0.1:1", "--path-levels", "two"},
		{"dev", "--nested-names=maybe"},
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

// --key-file gives an in-memory agent the identity `sluice id` made, so
// that the first members' ids are known before they start. The agent is
// asked to bootstrap a cluster without itself: its refusal names the id
// it would have run under.
func TestAgentKeyFile(t *testing.T) {
	dir := t.TempDir()
	code, id, stderr := runCapture(t, "id", "--data", dir)
	if code != ExitOK {
		t.Fatalf("id: %d %q", code, stderr)
	}
	id = strings.TrimSpace(id)
	code, _, stderr = runCapture(t, "agent", "--in-memory", "--key-file", dir+"/identity.key", "--api", "",
		"--listen", "/ip4/127.0.0.1/tcp/0", "--initial-members", "12D3KooWGzBf5jqxwWSiUrYC2L8t2PMJrcxZ4XQQ4cVhWjGKAAXz")
	if code != ExitUsage || !strings.Contains(stderr, "peer id "+id+" too") {
		t.Errorf("agent: %d %q, want a refusal naming %s", code, stderr, id)
	}
}

// The hidden flags stay out of the help.
func TestAgentHiddenFlags(t *testing.T) {
	code, stdout, _ := runCapture(t, "agent", "--help")
	if code != ExitOK {
		t.Fatalf("exit code = %d", code)
	}
	if !strings.Contains(stdout, "--key-file") {
		t.Errorf("help lacks --key-file:\n%s", stdout)
	}
	for _, hidden := range []string{"--broken", "--cpu-profile"} {
		if strings.Contains(stdout, hidden) {
			t.Errorf("help shows the hidden %s:\n%s", hidden, stdout)
		}
	}
	// Only a build with the mutants has --broken at all.
	if !mutation.Built {
		if code, _, stderr := runCapture(t, "agent", "--in-memory", "--broken", "quorum-of-one"); code != ExitUsage ||
			!strings.Contains(stderr, "unknown flag: --broken") {
			t.Errorf("--broken in a build without the mutants: exit %d %q, want %d and an unknown flag", code, stderr, ExitUsage)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := runCapture(t, args...)
		if code != ExitOK {
			t.Errorf("%v: exit code = %d, want %d", args, code, ExitOK)
		}
		want := "sluice " + versionString() + "\n"
		if stdout != want || !strings.Contains(stdout, runtime.Version()) || strings.Contains(stdout, "dev-build") {
			t.Errorf("%v: stdout = %q, want %q with Go's version", args, stdout, want)
		}
		if stderr != "" {
			t.Errorf("%v: stderr = %q, want empty", args, stderr)
		}
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

// Settings come from flags, then SLUICE_* variables, then the --config
// file; bad files and values are usage errors.
func TestAgentSettings(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/agent.yaml"
	if err := os.WriteFile(file, []byte("cluster-size: -1\nin-memory: true\nlisten:\n  - /ip4/127.0.0.1/tcp/0\npeers:\n  - /ip4/127.0.0.1/tcp/1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The file's cluster size -1 is refused...
	code, _, stderr := runCapture(t, "agent", "--config", file)
	if code != ExitUsage || !strings.Contains(stderr, "--cluster-size must be at least 1") {
		t.Fatalf("file: %d %q", code, stderr)
	}
	// ...the environment wins over it, and the file's peer (no /p2p/) is
	// then what is refused...
	t.Setenv("SLUICE_CLUSTER_SIZE", "3")
	code, _, stderr = runCapture(t, "agent", "--config", file)
	if code != ExitUsage || !strings.Contains(stderr, "has no /p2p/") {
		t.Fatalf("env over file: %d %q", code, stderr)
	}
	// ...and a flag wins over both.
	t.Setenv("SLUICE_CLUSTER_SIZE", "5")
	code, _, stderr = runCapture(t, "agent", "--config", file, "--cluster-size=-1")
	if code != ExitUsage || !strings.Contains(stderr, "--cluster-size must be at least 1") {
		t.Fatalf("flag over env: %d %q", code, stderr)
	}
	t.Setenv("SLUICE_CLUSTER_SIZE", "") // empty: as if unset
	for _, tc := range []struct{ content, want string }{
		{"colour: red\n", `unknown setting "colour"`},
		{"cluster-size: many\n", "cluster-size"},
		{"[not: a map\n", "--config"},
	} {
		if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCapture(t, "agent", "--config", file)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: %d %q", tc.content, code, stderr)
		}
		assertOneCleanLine(t, stderr, "sluice: ")
	}
	if code, _, stderr := runCapture(t, "agent", "--config", dir+"/missing.yaml"); code != ExitUsage {
		t.Errorf("missing file: %d %q", code, stderr)
	}
}

// TestTableName: a lock's name is a cell of its own in `sluice locks`:
// plain names as they are, anything that could add rows, columns or
// terminal escapes quoted.
func TestTableName(t *testing.T) {
	for name, want := range map[string]string{
		"/site":                 `/site`,
		"https://a.example/x?y": `https://a.example/x?y`,
		"/straße":               `/straße`,
		"/a\n/b holder":         `"/a\n/b holder"`,
		"/a b":                  `"/a b"`,
		"/a\x1b[2J":             `"/a\x1b[2J"`,
		"/a\xff":                `"/a\xff"`,
		`/a"b`:                  `"/a\"b"`,
		"":                      `""`,
	} {
		if got := tableName(name); got != want {
			t.Errorf("tableName(%q) = %s, want %s", name, got, want)
		}
	}
}

// Every flag's help reads as written: pflag takes the first `quoted`
// word of a usage as the flag's value name and prints it after the flag
// ("--path-levels sluice drain NAME/PART"), so no usage quotes so; and
// drain's --duration shows the default a drain has (its lease outlives
// a failed command), not lock's.
func TestFlagHelp(t *testing.T) {
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			seen++
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: a backquote in its usage: %q", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if seen < 50 {
		t.Fatalf("visited %d flags: the walk lost its way", seen)
	}
	code, stdout, _ := runCapture(t, "drain", "--help")
	if code != ExitOK || !strings.Contains(stdout, "(default "+keptDrain.String()+")") {
		t.Errorf("drain --help: exit %d, no default %s for --duration:\n%s", code, keptDrain, stdout)
	}
}

package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/semaphore/api"
)

// readmeBlock is the first fenced block of lang in the README.
func readmeBlock(t *testing.T, lang string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("README has no %s block", lang)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("README's %s block does not end", lang)
	}
	return block + "\n"
}

// TestReadmeExamples runs the README's Python and PHP frontends as
// written against a real agent: a page on a free site, the maintenance
// page during a drain, and the lock given back each time.
func TestReadmeExamples(t *testing.T) {
	sock := startDev(t)
	dir := shortDir(t)
	for _, ex := range []struct{ lang, interp, file string }{
		{"python", "python3", "sluice_read.py"},
		{"php", "php", "sluice_read.php"},
	} {
		t.Run(ex.lang, func(t *testing.T) {
			interp, err := exec.LookPath(ex.interp)
			if err != nil {
				t.Skipf("no %s (Debian: apt-get install %s)", ex.interp, map[string]string{"python3": "python3", "php": "php-cli php-curl"}[ex.interp])
			}
			path := filepath.Join(dir, ex.file)
			if err := os.WriteFile(path, []byte(readmeBlock(t, ex.lang)), 0o644); err != nil {
				t.Fatal(err)
			}
			runOn := func(sock string) string {
				t.Helper()
				// Bounded, as every wait here: a hung example fails the test.
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				defer cancel()
				cmd := exec.CommandContext(ctx, interp, path)
				cmd.Env = append(os.Environ(), "SLUICE_API="+sock)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", ex.interp, ex.file, err, out)
				}
				return string(out)
			}
			run := func() string { t.Helper(); return runOn(sock) }
			// No agent at the socket: the maintenance page, not a crash.
			if out := runOn(filepath.Join(dir, "no-agent.sock")); out != "503 maintenance: unavailable\n" {
				t.Fatalf("with no agent: %q", out)
			}
			if out := run(); !strings.HasPrefix(out, "200 page, fencing token ") {
				t.Fatalf("on a free site: %q", out)
			}
			// A drain holds the site: the maintenance page.
			writer := start(t, "lock", "/site", "--api", sock, "--mode", "read-write-priority", "--", "sh", "-c", "echo draining; exec sleep 30")
			writer.waitLine(t, "draining")
			if out := run(); out != "503 maintenance: draining\n" {
				t.Fatalf("during a drain: %q", out)
			}
			if err := writer.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			writer.wait(t)
			// The example released its lock: a writer gets the site at once.
			if code, _, errs := sluice(t, sock, "lock", "/site", "--try", "--", "true"); code != 0 {
				t.Fatalf("the example's lock was not released: exit %d %q", code, errs)
			}
		})
	}
}

// readmeBlockAfter is the first fenced block after the README line that
// contains marker.
func readmeBlockAfter(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), marker)
	if !ok {
		t.Fatalf("README has no %q", marker)
	}
	_, rest, ok = strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("README has no block after %q", marker)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("README's block after %q does not end", marker)
	}
	return block
}

// TestReadmeQuickStart runs the quick start's curl lines as written, with
// S the test agent's socket (the README's S= line names the per-user
// default) and the lease id the acquire printed for the sample one.
func TestReadmeQuickStart(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl (Debian: apt-get install curl)")
	}
	sock := startDev(t)
	block := readmeBlockAfter(t, "take a lock and give it back with curl")
	sample := regexp.MustCompile(`"lease":"([0-9.]+)"`).FindStringSubmatch(block)
	if sample == nil {
		t.Fatalf("no sample lease id in the quick start:\n%s", block)
	}
	ran, lease := 0, ""
	for _, line := range strings.Split(block, "\n") {
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "S=") {
			continue
		}
		if lease != "" { // the release gives back the lease the acquire printed
			line = strings.ReplaceAll(line, sample[1], lease)
		}
		cmd := exec.Command("bash", "-c", line)
		cmd.Env = append(os.Environ(), "S="+sock)
		b, err := cmd.Output()
		out := string(b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		ran++
		switch {
		case strings.Contains(line, "/v1/acquire"):
			var got struct {
				Lease string `json:"lease"`
				Token uint64 `json:"token"`
			}
			if json.Unmarshal(b, &got) != nil || got.Lease == "" || got.Token == 0 {
				t.Fatalf("%s: %q", line, out)
			}
			lease = got.Lease
		case strings.Contains(line, "/v1/release"):
			if strings.Contains(out, `"error"`) {
				t.Fatalf("%s: %q", line, out)
			}
		case strings.Contains(line, "/v1/status"):
			if !strings.Contains(out, `"state":"LOCK_READY"`) {
				t.Fatalf("%s: %q", line, out)
			}
		case strings.Contains(line, "/v1/locks"):
			if !strings.Contains(out, `"locks":`) {
				t.Fatalf("%s: %q", line, out)
			}
		}
	}
	if ran != 4 {
		t.Fatalf("ran %d of the quick start's curl lines, want 4:\n%s", ran, block)
	}
}

// TestReadmeSession runs the "Using it" session as written, with the
// test's build for `go run ./cmd/sluice` and its agent in SLUICE_API. A
// line ending in & runs in the background, and the next starts once its
// lock is in the table, as a person typing would see it.
func TestReadmeSession(t *testing.T) {
	sock := startDev(t)
	block := readmeBlockAfter(t, "## Using it")
	comment := regexp.MustCompile(`\s+#\s.*$`)
	var background []*proc
	ran := 0
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(comment.ReplaceAllString(line, ""))
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "go run ./cmd/sluice ") {
			t.Fatalf("the session has a line that is not a sluice command: %q", line)
		}
		line = strings.Replace(line, "go run ./cmd/sluice", binary, 1)
		ran++
		if bg, ok := strings.CutSuffix(line, "&"); ok {
			cmd := exec.Command("bash", "-c", "exec "+strings.TrimSpace(bg))
			cmd.Env = append(os.Environ(), "SLUICE_API="+sock)
			background = append(background, startProc(t, cmd))
			name := strings.Fields(bg)[2]
			waitHolder(t, sock, name)
			continue
		}
		cmd := exec.Command("bash", "-c", line)
		cmd.Env = append(os.Environ(), "SLUICE_API="+sock)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		want := map[string]string{"status": "LOCK_READY", "lock": "holding /jobs/report, token ", "drain": "upgrading",
			"locks": "/jobs/nightly", "unlock": "released "}[strings.Fields(line)[1]]
		if !strings.Contains(string(out), want) {
			t.Fatalf("%s: %q lacks %q", line, out, want)
		}
	}
	if ran != 7 || len(background) != 2 {
		t.Fatalf("ran %d lines of the session (%d in the background), want 7 (2):\n%s", ran, len(background), block)
	}
	// The reader ended by itself; the nightly job lost its lock to the
	// operator's unlock --force.
	if code := background[0].wait(t); code != 0 {
		t.Fatalf("the reader exited %d", code)
	}
	if code := background[1].wait(t); code != 76 {
		t.Fatalf("the force-unlocked job exited %d, want 76", code)
	}
}

// waitHolder waits until name has a holder in the agent's table: a
// background sluice lock was granted.
func waitHolder(t *testing.T, sock, name string) {
	t.Helper()
	waitLock(t, sock, name, "a holder", func(l api.Lock) bool {
		return slices.ContainsFunc(l.Entries, func(e api.Entry) bool { return e.Holder })
	})
}

// TestReadmeSwarmKey runs the README's commands that make the cluster
// secret, as written but for the file's path, and an agent takes the key.
func TestReadmeSwarmKey(t *testing.T) {
	dir := shortDir(t)
	key := filepath.Join(dir, "swarm.key")
	block := readmeBlockAfter(t, "The swarm key is 32 random bytes")
	if !strings.Contains(block, "/etc/sluice/swarm.key") {
		t.Fatalf("the swarm key block names no /etc/sluice/swarm.key:\n%s", block)
	}
	if out, err := exec.Command("bash", "-ec", strings.ReplaceAll(block, "/etc/sluice/swarm.key", key)).CombinedOutput(); err != nil {
		t.Fatalf("the README's swarm key commands: %v\n%s", err, out)
	}
	p := start(t, "agent", "--data", filepath.Join(dir, "data"), "--listen", "/ip4/127.0.0.1/tcp/0", "--psk-file", key,
		"--api", filepath.Join(dir, "api.sock"))
	p.waitLine(t, "API on")
	stopAgent(t, p)
}

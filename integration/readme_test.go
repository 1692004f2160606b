package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
			run := func() string {
				t.Helper()
				cmd := exec.Command(interp, path)
				cmd.Env = append(os.Environ(), "SLUICE_API="+sock)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", ex.interp, ex.file, err, out)
				}
				return string(out)
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

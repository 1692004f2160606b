package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/semaphore/api"
)

// TestSoftHardDrainsAndPatientReaderDoNotStall: a reader holds /site; a
// soft drain S, a hard drain P and a reader R with a timeout ask for it in
// that order. Once the first reader leaves, all three are granted and run
// their commands: none waits for R's timeout (S keeping its place would
// make P wait for S, S for R and R for P). Each command logs its start and
// end to one file: no writer's run shares the name with another's.
func TestSoftHardDrainsAndPatientReaderDoNotStall(t *testing.T) {
	sock := startDev(t)
	log := filepath.Join(shortDir(t), "runs")
	startLogged := func(args ...string) *proc {
		t.Helper()
		cmd := exec.Command(binary, append([]string{args[0], "--api", sock}, args[1:]...)...)
		cmd.Env = append(os.Environ(), "LOG="+log)
		return startProc(t, cmd)
	}
	// run is a command that logs its start and end around a short hold,
	// so that an overlap with another holder would show in the log.
	run := func(who string) []string {
		return []string{"--", "sh", "-c", `echo "start ` + who + `" >> "$LOG"; sleep 0.3; echo "end ` + who + `" >> "$LOG"; echo "ran ` + who + `"`}
	}

	holder := startLogged("lock", "/site", "--mode", "read-only", "--", "sh", "-c",
		`echo "start H" >> "$LOG"; trap 'echo "end H" >> "$LOG"; exit 0' TERM; echo holding; while :; do sleep 0.05; done`)
	holder.waitLine(t, "holding")

	has := func(pred func(api.Entry) bool) func(api.Lock) bool {
		return func(l api.Lock) bool { return slices.ContainsFunc(l.Entries, pred) }
	}
	inLine := func(mode string) func(api.Entry) bool {
		return func(e api.Entry) bool { return e.Mode == mode && e.Ticket != 0 && !e.Holder }
	}
	soft := startLogged(append([]string{"drain", "/site", "--mode", "soft"}, run("S")...)...)
	waitLock(t, sock, "/site", "the soft drain waiting", has(inLine("read-write")))
	hard := startLogged(append([]string{"drain", "/site"}, run("P")...)...)
	waitLock(t, sock, "/site", "the hard drain waiting", has(inLine("read-write-priority")))
	// The reader may wait: turned away from the agent's draining shared
	// read ticket, it takes a ticket of its own, behind the hard drain.
	reader := startLogged(append([]string{"lock", "/site", "--mode", "read-only", "--timeout", "20s"}, run("R")...)...)
	waitLock(t, sock, "/site", "the patient reader waiting", has(func(e api.Entry) bool {
		return inLine("read-only")(e) && !e.Active
	}))
	// Nobody was granted while the first reader holds.
	if b, _ := os.ReadFile(log); string(b) != "start H\n" {
		t.Fatalf("while the first reader holds, the log is:\n%s", b)
	}

	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t); code != 0 {
		t.Fatalf("the first reader exited %d after SIGTERM\n%s", code, holder.output)
	}
	for _, w := range []struct {
		who string
		p   *proc
	}{{"S", soft}, {"P", hard}, {"R", reader}} {
		code := w.p.wait(t)
		w.p.rest(t) // the rest of its lines, into its output
		if code != 0 || !strings.Contains(w.p.output.String(), "ran "+w.who+"\n") {
			t.Errorf("%s exited %d (75: not obtained in time), want 0 and %q; output:\n%s", w.who, code, "ran "+w.who, w.p.output)
		}
	}

	// Exclusivity: each writer's start is followed at once by its end.
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 8 || lines[0] != "start H" || lines[1] != "end H" {
		t.Fatalf("the runs' log, want the first reader's run first and four runs in all:\n%s", b)
	}
	for i, l := range lines {
		for _, w := range []string{"S", "P"} {
			if l == "start "+w && (i+1 == len(lines) || lines[i+1] != "end "+w) {
				t.Fatalf("writer %s shared the name with another run:\n%s", w, b)
			}
		}
	}
	t.Logf("runs in order:\n%s", b)
}

// TestLimitCountsAnotherAgentsPageViews: three page views hold /page on
// agent A's shared read ticket (one ticket in the table for all three). A
// reader limited to 2 through agent B is refused at once: it would be the
// fourth. A shared ticket's page views come and go on A without asking
// the leaders, so a limited reader takes the ticket as full whatever its
// count (--limit 4 --try is refused too), asks A to let it go once idle,
// and is granted, waiting, as soon as the page views end.
func TestLimitCountsAnotherAgentsPageViews(t *testing.T) {
	c := newFaultCluster(t, 3, false)
	c.startAll()
	defer c.stopAll()
	a, b := c.nodes[0], c.nodes[1]
	var views []*proc
	for range 3 {
		v := start(t, "lock", "/page", "--mode", "read-only", "--api", a.sock, "--", "sh", "-c", "echo viewing; exec sleep 30")
		v.waitLine(t, "viewing")
		views = append(views, v)
	}
	// The three are on A's shared read ticket, as B's view of the table
	// tells.
	waitLock(t, b.sock, "/page", "A's shared read ticket with 3 readers", func(l api.Lock) bool {
		return len(l.Entries) == 1 && l.Entries[0].Active && l.Entries[0].Readers != nil && *l.Entries[0].Readers == 3
	})

	if code, out, errs := sluice(t, b.sock, "lock", "/page", "--mode", "read-only", "--limit", "2", "--try", "--", "echo", "in"); code != 75 {
		t.Errorf("--limit 2 --try through B while 3 page views hold through A: exit %d %q %q, want 75", code, out, errs)
	}
	if code, out, errs := sluice(t, b.sock, "lock", "/page", "--mode", "read-only", "--limit", "4", "--try", "--", "echo", "in"); code != 75 {
		t.Errorf("--limit 4 --try through B while page views hold A's shared read ticket: exit %d %q %q, want 75", code, out, errs)
	}
	limited := start(t, "lock", "/page", "--mode", "read-only", "--limit", "4", "--timeout", "60s", "--api", b.sock, "--", "echo", "limited in")
	waitLock(t, b.sock, "/page", "the limited reader waiting behind the shared ticket", func(l api.Lock) bool {
		return len(l.Entries) == 2
	})
	for _, v := range views {
		if err := v.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		v.wait(t)
	}
	limited.waitLine(t, "limited in")
	if code := limited.wait(t); code != 0 {
		t.Errorf("--limit 4 through B once the page views ended: exit %d, want 0", code)
	}
}

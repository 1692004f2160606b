package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/api"
)

// TestLockRidesOutAgentRestart: three agents; `sluice lock` and `sluice
// drain` run a command that waits for a file, and their agent is
// restarted under them (SIGTERM, as an upgrade does, and SIGKILL). The
// command keeps running: the restarted agent takes the lease over from
// the leaders when the client renews it, no other client gets the name
// meanwhile, and the command, once the file is there, ends with exit 0;
// then the name is free.
func TestLockRidesOutAgentRestart(t *testing.T) {
	root := shortDir(t)
	nodes := agents(t, root, 3)
	for i := range nodes {
		run(t, nodes, i)
	}
	allReady(t, nodes)
	outer := t // the agents outlive each subtest

	for _, tc := range []struct {
		verb, name string
		under      int            // the agent restarted under the command
		sig        syscall.Signal // how it stops
		other      []string       // a try through another agent, refused while held
	}{
		{"lock", "/job", 2, syscall.SIGTERM, []string{"lock", "/job", "--try", "--", "true"}},
		{"drain", "/site", 1, syscall.SIGKILL, []string{"lock", "/site", "--mode", "read-only", "--try", "--", "true"}},
	} {
		t.Run(tc.verb, func(t *testing.T) {
			a := nodes[tc.under]
			other := nodes[(tc.under+1)%len(nodes)]
			release := filepath.Join(root, strings.TrimPrefix(tc.name, "/")+".go")
			// Bounded, so that a failed test leaves no shell behind.
			script := `echo "holding $SLUICE_TOKEN"; i=0; until [ -e "$1" ]; do i=$((i+1)); [ $i -lt 1200 ] || exit 9; sleep 0.05; done; echo finished`
			p := start(t, tc.verb, tc.name, "--api", a.sock, "--", "sh", "-c", script, "sh", release)
			p.waitLine(t, "holding")
			refused := func(when string) {
				t.Helper()
				if code, _, errs := sluice(t, other.sock, tc.other...); code != 75 {
					t.Fatalf("%s: `sluice %s` through another agent exited %d (%s), want 75: the name is held", when, strings.Join(tc.other, " "), code, errs)
				}
			}
			refused("before the restart")

			if err := a.p.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			a.p.wait(t)
			refused("while the agent is down")
			run(outer, nodes, tc.under)
			allReady(t, nodes)
			refused("after the restart")
			// The client renews through the restarted agent, which takes the
			// lease over: its own requests list it as held again.
			waitOwnHeld(t, a.sock, tc.name)
			refused("once the restarted agent holds the lease")

			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != 0 {
				t.Fatalf("%s exited %d after its agent's restart, want 0; output:\n%s%s", tc.verb, code, p.output, p.rest(t))
			}
			if out := p.rest(t); !strings.Contains(p.output.String()+out, "finished") || strings.Contains(out, "lost") {
				t.Fatalf("%s's output:\n%s%s", tc.verb, p.output, out)
			}
			if code, _, errs := sluice(t, other.sock, tc.other...); code != 0 {
				t.Fatalf("after the command: `sluice %s` exited %d (%s), want 0: the name is free", strings.Join(tc.other, " "), code, errs)
			}
		})
	}
	for _, n := range nodes {
		stopAgent(t, n.p)
	}
}

// waitOwnHeld waits until the agent at sock lists a request of its own on
// name as held.
func waitOwnHeld(t *testing.T, sock, name string) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		code, out, _ := sluice(t, sock, "locks", name, "--json")
		var tab api.Table
		if code == 0 && json.Unmarshal([]byte(out), &tab) == nil &&
			slices.ContainsFunc(tab.Requests, func(r api.OwnRequest) bool { return r.Name == name && r.Phase == "held" }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted agent does not hold %s after %v:\n%s", name, bound, out)
		}
		time.Sleep(20 * time.Millisecond) // polling the table, bounded: no outside signal says it changed
	}
}

package integration

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestFaultLostLeaderStore: a leader's disk is lost (SIGKILL, its data
// directory deleted) while a client of another node holds a drain, with
// the workload running. Restarted with its old flags, the wiped machine is
// refused rather than bootstrap again; the membership runbook (remove the
// old identity, start the machine afresh with --join, add the new one)
// brings the cluster back to five voters and three live leaders, and the
// checks find the drain held throughout, tokens growing and every name
// granted through every agent, the replacement's included.
func TestFaultLostLeaderStore(t *testing.T) {
	r := newFaultRun(t, false)
	held := r.keptDrain(12 * time.Second)
	holder := r.c.others(r.c.leaders(0)...)[0]
	r.run(time.Second)
	lost := r.c.leaders(holder)[0]
	ln := r.c.nodes[lost]
	oldID := ln.id
	r.c.kill(lost)
	if err := os.RemoveAll(ln.data); err != nil {
		t.Fatal(err)
	}
	// Restarted as it was (same flags): its new identity is not one of the
	// initial members, so it is refused rather than bootstrap again.
	if code, _, errs := sluice(t, "", r.c.args(lost)...); code != 64 || !strings.Contains(errs, "--join") {
		t.Fatalf("restart of the wiped leader with its old flags: exit %d %q", code, errs)
	}
	r.run(time.Second)

	// The runbook. 1: remove the lost member.
	other := r.c.nodes[r.c.others(lost, holder)[0]]
	if code, out, errs := sluice(t, other.sock, "members", "remove", oldID); code != 0 {
		t.Fatalf("members remove: exit %d %q %q", code, out, errs)
	}
	// 2: start the machine afresh, as a new identity that joins.
	r.c.newIdentity(lost)
	r.c.start(lost)
	// 3: add it once the cluster has heard from it.
	deadline := time.Now().Add(bound)
	for {
		code, out, errs := sluice(t, other.sock, "members", "add", ln.id)
		if code == 0 {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(errs, "never said hello") {
			t.Fatalf("members add: exit %d %q %q", code, out, errs)
		}
		time.Sleep(100 * time.Millisecond) // the new node's hellos take a moment
	}
	r.c.waitReady()
	code, out, _ := sluice(t, other.sock, "members", "--json")
	if code != 0 || strings.Count(out, `"voter": true`) != 5 {
		t.Fatalf("members after the runbook: exit %d\n%s", code, out)
	}
	waitLiveLeaders(t, other.c, 3)
	r.wasKept(held)
	r.run(time.Second)
	r.finish()
}

// waitLiveLeaders waits until the node of c sees want leaders, all alive.
func waitLiveLeaders(t *testing.T, c *http.Client, want int) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		st, err := status(c)
		if err == nil {
			ls, _ := st["view"].(map[string]any)["leaders"].([]any)
			alive := 0
			for _, m := range st["members"].([]any) {
				mm := m.(map[string]any)
				if mm["leader"] == true && mm["alive"] == true {
					alive++
				}
			}
			if len(ls) == want && alive == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %d live leaders after %v: %v %v", want, bound, st, err)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's state
	}
}

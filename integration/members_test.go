package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBootstrapFlags, on the real binary. An
// agent with peers but no bootstrap used to elect itself alone; now it is
// a usage error. --in-memory with --data used to bring a persisted
// identity back without its votes; now it is refused. A node whose store
// was lost while its identity key stayed is refused with the runbook.
func TestBootstrapFlags(t *testing.T) {
	dir := shortDir(t)
	other := peerID(t, filepath.Join(dir, "other"))
	peer := "/ip4/127.0.0.1/tcp/1/p2p/" + other
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--data", filepath.Join(dir, "a"), "--peers", peer}, "--initial-members"},
		{[]string{"--in-memory", "--data", filepath.Join(dir, "b")}, "--in-memory"},
		{[]string{"--data", filepath.Join(dir, "c"), "--initial-members", other}, "own peer id"},
		{[]string{"--data", filepath.Join(dir, "d"), "--join", "--initial-members", other}, "exclude each other"},
	} {
		args := append([]string{"agent", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", filepath.Join(dir, "x.sock")}, tc.args...)
		code, _, errs := sluice(t, "", args...)
		if code != 64 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 64 and %q", tc.args, code, errs, tc.want)
		}
	}

	// A cluster of one, started and stopped; then its Badger directory is
	// lost while identity.key stays: refused, nothing served.
	data := filepath.Join(dir, "solo")
	sock := filepath.Join(dir, "solo.sock")
	p := start(t, "agent", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", sock)
	p.waitLine(t, "API on")
	c := unixClient(sock)
	waitReady(t, c)
	if code, out := post(t, c, "/v1/acquire", `{"name":"/x","try":true}`); code != 200 {
		t.Fatalf("acquire on a cluster of one: %d %v", code, out)
	}
	stopAgent(t, p)
	if err := os.RemoveAll(filepath.Join(data, "badger")); err != nil {
		t.Fatal(err)
	}
	code, _, errs := sluice(t, "", "agent", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", sock)
	if code != 1 || !strings.Contains(errs, "state lost") || !strings.Contains(errs, "A node lost its disk") {
		t.Fatalf("restart with a lost store: exit %d %q", code, errs)
	}
}

func waitReady(t *testing.T, cs ...*http.Client) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for _, c := range cs {
		for {
			s, err := status(c)
			if err == nil && s["state"] == "LOCK_READY" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not ready after %v: %v %v", bound, s, err)
			}
			time.Sleep(50 * time.Millisecond) // polling another process's state
		}
	}
}

func stopAgent(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("agent exited %d after SIGTERM", code)
	}
}

// TestVouchForStore: three agents; agent 3 is lost for good and agent 2
// is killed and restarted from its directory. Agent 2 cannot check in (it
// needs both other members), so without its vote nothing can commit. The
// operator vouches for agent 2's store (`sluice members vouch`): it checks
// in with agent 1, the removal of agent 3 commits, and the drain held
// through agent 1 all along is still in force, its next token larger.
func TestVouchForStore(t *testing.T) {
	nodes := agents(t, shortDir(t), 3)
	for i := range nodes {
		run(t, nodes, i)
	}
	allReady(t, nodes)
	code, held := post(t, nodes[0].c, "/v1/acquire", `{"name":"/site","mode":"read-write-priority","duration":"10m"}`)
	if code != 200 {
		t.Fatalf("acquire: %d %v", code, held)
	}
	for _, i := range []int{2, 1} {
		if err := nodes[i].p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		nodes[i].p.wait(t)
	}
	run(t, nodes, 1)
	if code, out, errs := sluice(t, nodes[0].sock, "members", "vouch"); code != 1 || !strings.Contains(errs, "checked in already") {
		t.Fatalf("members vouch at a node that checked in: exit %d %q %q", code, out, errs)
	}
	// Agent 2 waits for its check-in, and says what to do.
	deadline := time.Now().Add(bound)
	for {
		s, err := status(nodes[1].c)
		if err == nil && strings.Contains(fmt.Sprint(s["reason"]), "1 of 2 other members confirmed") {
			if !strings.Contains(fmt.Sprint(s["reason"]), "sluice members vouch") {
				t.Fatalf("agent 2's reason does not name the remedy: %v", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent 2 after its restart: %v %v", s, err)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's state
	}
	code, out, errs := sluice(t, nodes[1].sock, "members", "vouch")
	if code != 0 || !strings.Contains(out, "vouched for node") {
		t.Fatalf("members vouch: exit %d %q %q", code, out, errs)
	}
	t.Logf("sluice members vouch at agent 2: %s", strings.TrimSpace(out))
	waitReady(t, nodes[0].c, nodes[1].c)
	lostID := nodes[2].addr[strings.Index(nodes[2].addr, "/p2p/")+len("/p2p/"):]
	code, out, errs = sluice(t, nodes[0].sock, "members", "remove", lostID)
	if code != 0 {
		t.Fatalf("members remove of the lost agent: exit %d %q %q", code, out, errs)
	}
	t.Logf("sluice members remove at agent 1: %s", strings.TrimSpace(out))
	code, out, _ = sluice(t, nodes[1].sock, "members", "--json")
	if code != 0 || strings.Count(out, `"voter": true`) != 2 {
		t.Fatalf("members after the removal: exit %d\n%s", code, out)
	}
	waitReady(t, nodes[0].c, nodes[1].c)
	if code, out := post(t, nodes[1].c, "/v1/acquire", `{"name":"/site","mode":"read-only","try":true}`); code != 503 || out["error"] != "draining" {
		t.Fatalf("a reader through agent 2 while the drain holds: %d %v", code, out)
	}
	if code, out := post(t, nodes[0].c, "/v1/release", fmt.Sprintf(`{"lease":%q}`, held["lease"])); code != 200 {
		t.Fatalf("release: %d %v", code, out)
	}
	code, next := post(t, nodes[1].c, "/v1/acquire", `{"name":"/site","timeout":"30s"}`)
	if code != 200 || next["token"].(float64) <= held["token"].(float64) {
		t.Fatalf("acquire through agent 2: %d %v (held token %v)", code, next, held["token"])
	}
	for _, n := range nodes[:2] {
		stopAgent(t, n.p)
	}
}

package integration

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestFullRestartKeepsLease: five
// agents, a 120 s lease held through agent 5, all five killed with SIGKILL
// and restarted from their directories. Tries through every agent are
// refused while the client still holds the lease (its client outlives the
// agents), the client gives it back through its restarted agent by the
// id it was given, and the next grant's token is larger.
func TestFullRestartKeepsLease(t *testing.T) {
	nodes := agents(t, shortDir(t), 5)
	for i := range nodes {
		run(t, nodes, i)
	}
	allReady(t, nodes)
	code, held := post(t, nodes[4].c, "/v1/acquire", `{"name":"/site","mode":"read-write-priority","duration":"120s"}`)
	if code != 200 {
		t.Fatalf("acquire: %d %v", code, held)
	}
	for _, n := range nodes {
		if err := n.p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		n.p.wait(t)
	}
	for i := range nodes {
		run(t, nodes, i)
	}
	allReady(t, nodes)
	for i, n := range nodes {
		if code, out := post(t, n.c, "/v1/acquire", `{"name":"/site","try":true}`); code != 409 {
			t.Fatalf("try through agent %d after the full restart: %d %v; want 409 (held through agent 5)", i+1, code, out)
		}
		if code, out := post(t, n.c, "/v1/acquire", `{"name":"/site","mode":"read-only","try":true}`); out["error"] != "draining" {
			t.Fatalf("reader's try through agent %d after the full restart: %d %v; want draining", i+1, code, out)
		}
	}
	// Agent 5's new life learns from the leaders which of its former
	// tickets they keep; until then the id is unknown to it.
	deadline := time.Now().Add(bound)
	for {
		code, out := post(t, nodes[4].c, "/v1/release", fmt.Sprintf(`{"lease":%q}`, held["lease"]))
		if code == 200 {
			break
		}
		if code != 404 || time.Now().After(deadline) {
			t.Fatalf("release of the former lease through agent 5: %d %v", code, out)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's state
	}
	code, next := post(t, nodes[0].c, "/v1/acquire", `{"name":"/site","timeout":"30s"}`)
	if code != 200 || next["token"].(float64) <= held["token"].(float64) {
		t.Fatalf("acquire after the release: %d %v (held token %v)", code, next, held["token"])
	}
	for _, n := range nodes {
		stopAgent(t, n.p)
	}
}

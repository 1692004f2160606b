package integration

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// resources are the agents' goroutines and open file descriptors when the
// workload started, per process.
type resources struct {
	pid        map[int]int // node -> pid sampled
	goroutines map[int]int
	fds        map[int]int
}

// Slack for what a busy agent holds at any moment (streams being opened
// and closed, a watch per lease); growth beyond it after the workload
// stopped is a leak.
const (
	goroutineSlack = 40
	fdSlack        = 20
)

func sampleResources(t *testing.T, c *faultCluster) *resources {
	t.Helper()
	r := &resources{pid: map[int]int{}, goroutines: map[int]int{}, fds: map[int]int{}}
	for _, i := range c.running() {
		g, f, err := agentResources(c.nodes[i])
		if err != nil {
			t.Fatalf("resources of agent %d: %v", i+1, err)
		}
		r.pid[i], r.goroutines[i], r.fds[i] = c.nodes[i].p.cmd.Process.Pid, g, f
	}
	return r
}

// check: every agent that ran through the whole test (same process) holds
// no more goroutines and file descriptors than at the start, give or take
// the slack, once the workload stopped (polled: streams close lazily).
func (r *resources) check(t *testing.T, c *faultCluster) {
	t.Helper()
	for i, pid := range r.pid {
		n := c.nodes[i]
		if n.p == nil || n.exited() || n.p.cmd.Process.Pid != pid {
			continue // restarted: another process
		}
		var g, f int
		var err error
		deadline := time.Now().Add(bound / 2)
		for {
			g, f, err = agentResources(n)
			if err == nil && g <= r.goroutines[i]+goroutineSlack && f <= r.fds[i]+fdSlack {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %d leaks: %d goroutines and %d file descriptors at the end, %d and %d at the start (%v)",
					i+1, g, f, r.goroutines[i], r.fds[i], err)
			}
			time.Sleep(100 * time.Millisecond) // polling another process's state
		}
		t.Logf("agent %d: goroutines %d -> %d, file descriptors %d -> %d", i+1, r.goroutines[i], g, r.fds[i], f)
	}
}

// agentResources reads an agent's goroutines from its metrics and its open
// file descriptors from /proc.
func agentResources(n *faultNode) (goroutines, fds int, err error) {
	g, err := metric(n, "go_goroutines")
	if err != nil {
		return 0, 0, err
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", n.p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	return int(g), len(ents), nil
}

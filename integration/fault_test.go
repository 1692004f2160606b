package integration

import (
	"syscall"
	"testing"
	"time"
)

// The fault tests (issue 12): five agents as processes with their own
// data directories and a cluster secret, a mixed workload through the Go
// client and the CLI, one fault each, then the checks: porcupine on the
// client-observed history, exclusion by the clients' own intervals,
// tokens growing, lease ids never repeated, every agent ready and every
// name granted through every agent after the fault, and no growth of the
// agents' goroutines or file descriptors.

// faultRun is the frame of one fault test: a ready cluster, the workload
// running for a while, the fault, the workload on after it, then checks.
type faultRun struct {
	t   *testing.T
	c   *faultCluster
	w   *workload
	res *resources
}

func newFaultRun(t *testing.T, lab bool) *faultRun {
	t.Helper()
	c := newFaultCluster(t, 5, lab)
	c.startAll()
	r := &faultRun{t: t, c: c}
	r.res = sampleResources(t, c)
	r.w = startWorkload(c, 2)
	return r
}

// run lets the workload go on for d.
func (r *faultRun) run(d time.Duration) { time.Sleep(d) } // the workload runs meanwhile: this is its length, not a wait for a signal

// finish stops the workload, checks liveness, the history and the agents'
// resources, and stops the cluster.
func (r *faultRun) finish() {
	r.t.Helper()
	h := r.w.stop()
	r.c.waitReady()
	probeNames(r.t, r.c, r.w.names)
	sum := checkHistory(r.t, h)
	r.t.Logf("history: %s", sum)
	r.res.check(r.t, r.c)
	r.c.stopAll()
}

// TestFaultKillLeader: SIGKILL of one leader, restarted from its
// directory.
func TestFaultKillLeader(t *testing.T) {
	r := newFaultRun(t, false)
	r.run(2 * time.Second)
	l := r.c.leaders(0)[0]
	r.c.kill(l)
	r.run(3 * time.Second)
	r.c.start(l)
	r.run(2 * time.Second)
	r.finish()
}

// TestFaultKillTwoLeaders: SIGKILL of two leaders at once, restarted.
func TestFaultKillTwoLeaders(t *testing.T) {
	r := newFaultRun(t, false)
	r.run(2 * time.Second)
	ls := r.c.leaders(0)
	r.c.kill(ls[0])
	r.c.kill(ls[1])
	r.run(3 * time.Second)
	r.c.start(ls[0])
	r.c.start(ls[1])
	r.run(2 * time.Second)
	r.finish()
}

// TestFaultPauseLeader: SIGSTOP of a leader for longer than a lease (4 s),
// then SIGCONT.
func TestFaultPauseLeader(t *testing.T) {
	r := newFaultRun(t, false)
	r.run(2 * time.Second)
	l := r.c.leaders(0)[0]
	r.c.signal(l, syscall.SIGSTOP)
	r.run(6 * time.Second)
	r.c.signal(l, syscall.SIGCONT)
	r.run(2 * time.Second)
	r.finish()
}

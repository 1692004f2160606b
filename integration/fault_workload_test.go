package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
)

// outcome of an acquire, as its client saw it.
type outcome uint8

const (
	granted outcome = iota + 1
	refused         // the agent answered: not granted (timed out, draining, not ready, ...)
	unknown         // no answer (connection lost, deadline): it may have been granted; never used
)

// histOp is one operation of a client, its invoke and return read from
// one monotonic clock in the test process. An acquire's interval holds
// its grant; an end's interval holds the moment the client stopped
// acting under the lease (at Done, its own expiry, or before releasing).
type histOp struct {
	client    int
	name      string
	mode      semaphore.Mode
	end       bool
	call, ret time.Duration
	outcome   outcome
	token     uint64
	lease     string
	why       string // for refused and unknown: the error
	via       string // "go" or "cli"
	exactUse  bool   // a Go client's: [ret of acquire, call of end] is exactly when it used the lease
}

func (o histOp) writes() bool { return o.mode != semaphore.ReadOnly }

// recorder collects the history of a run.
type recorder struct {
	mu   sync.Mutex
	base time.Time
	ops  []histOp
}

func newRecorder() *recorder { return &recorder{base: time.Now()} }

func (r *recorder) now() time.Duration { return time.Since(r.base) }

func (r *recorder) add(o histOp) {
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

func (r *recorder) history() []histOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]histOp(nil), r.ops...)
}

// workload is the mixed load of a fault test: Go clients on every agent
// and a CLI client that goes through every agent in turn, on a few
// names, in all four modes and exclusive, short holds well inside their
// leases.
type workload struct {
	c       *faultCluster
	rec     *recorder
	names   []string
	wg      sync.WaitGroup
	cancel  context.CancelFunc
	clients int
	// the agents clients use (nil: all)
	via []int
}

// workloadModes are the modes clients ask for on each name: hard writers
// (priority, exclusive) on /a and /b, soft writers on /c, readers on all.
// A soft and a hard writer on one name with readers can wait for each
// other until one times out (the soft writer waits for a reader ticket
// that waits behind the hard writer, which waits behind the soft one: a
// liveness gap of the modes), which would starve the
// workload of grants.
var workloadModes = map[string][]semaphore.Mode{
	"/a": {semaphore.ReadOnly, semaphore.ReadOnly, semaphore.ReadOnly, semaphore.Exclusive, semaphore.ReadWritePriority},
	"/b": {semaphore.ReadOnly, semaphore.ReadOnly, semaphore.ReadOnly, semaphore.Exclusive, semaphore.ReadWritePriority},
	"/c": {semaphore.ReadOnly, semaphore.ReadOnly, semaphore.ReadOnly, semaphore.ReadWrite, semaphore.ReadWriteGentle},
}

func pick(rng *rand.Rand, names []string) (string, semaphore.Mode) {
	name := names[rng.IntN(len(names))]
	modes := workloadModes[name]
	return name, modes[rng.IntN(len(modes))]
}

// startWorkload starts perAgent Go clients on each agent of via (all when
// empty) and one CLI client; they run until stop.
func startWorkload(c *faultCluster, perAgent int, via ...int) *workload {
	if len(via) == 0 {
		for i := range c.nodes {
			via = append(via, i)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{c: c, rec: newRecorder(), names: []string{"/a", "/b", "/c"}, cancel: cancel, via: via}
	for _, i := range via {
		for range perAgent {
			id := w.clients
			w.clients++
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				w.goClient(ctx, id, c.nodes[i])
			}()
		}
	}
	id := w.clients
	w.clients++
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.cliClient(ctx, id)
	}()
	return w
}

// stop ends the workload and waits for its clients.
func (w *workload) stop() []histOp {
	w.cancel()
	w.wg.Wait()
	return w.rec.history()
}

func (w *workload) goClient(ctx context.Context, id int, n *faultNode) {
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	for ctx.Err() == nil {
		name, mode := pick(rng, w.names)
		o := client.Options{Timeout: 2 * time.Second, Duration: 4 * time.Second, Quiet: 20 * time.Millisecond,
			Try: rng.IntN(4) == 0}
		w.holdOnce(ctx, id, n, name, mode, o, time.Duration(5+rng.IntN(40))*time.Millisecond)
	}
}

// holdOnce acquires name and holds it for hold, or until the lease ends
// (Done: lost, or its own expiry timer), then releases it. It says
// whether the lease was granted and lasted the whole hold, and if not,
// why (refused or unanswered, or ended early: when, and the lease's error).
func (w *workload) holdOnce(ctx context.Context, id int, n *faultNode, name string, mode semaphore.Mode,
	o client.Options, hold time.Duration) (kept bool, why string) {
	op := histOp{client: id, name: name, mode: mode, via: "go", exactUse: true, call: w.rec.now()}
	// The call has its own deadline beyond the agent's timeout: a paused or
	// killed agent must not hold the client for ever. Ending the workload
	// does not cut a call short (that would only make outcomes unknown).
	actx, cancel := context.WithTimeout(context.Background(), o.Timeout+3*time.Second)
	l, err := n.cl.Acquire(actx, name, mode, o)
	cancel()
	op.ret = w.rec.now()
	var ae *client.APIError
	switch {
	case err == nil:
		op.outcome, op.token, op.lease = granted, l.Token(), l.ID()
	case errors.As(err, &ae):
		op.outcome, op.why = refused, ae.Code
	default:
		op.outcome, op.why = unknown, err.Error()
	}
	w.rec.add(op)
	if err != nil {
		if op.outcome == unknown || op.why == "not_ready" {
			sleepCtx(ctx, 50*time.Millisecond) // the agent is gone, paused or not serving: do not spin
		}
		return false, fmt.Sprintf("not granted (%s at %v after %v): %v", op.outcome, op.ret, op.ret-op.call, err)
	}
	timer := time.NewTimer(hold)
	select {
	case <-timer.C:
		kept = true
	case <-l.Done():
		why = fmt.Sprintf("granted at %v, token %d, ended at %v: %v", op.ret, op.token, w.rec.now(), l.Err())
	}
	timer.Stop()
	// From here on the client no longer acts under the lease.
	at := w.rec.now()
	w.rec.add(histOp{client: id, name: name, mode: mode, end: true, call: at, ret: at, token: op.token,
		lease: op.lease, via: "go", exactUse: true})
	rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_ = l.Release(rctx) // its outcome does not matter to safety: the client stopped
	cancel()
	return kept, why
}

// cliClient runs `sluice lock` with a child that prints when it starts and
// ends acting under the lock; its lines are timed as they arrive, so the
// grant lies between the command's start and the first line, and the end
// between the start and the last.
func (w *workload) cliClient(ctx context.Context, id int) {
	rng := rand.New(rand.NewPCG(uint64(id), 11))
	for k := 0; ctx.Err() == nil; k++ {
		name, mode := pick(rng, w.names)
		w.cliOnce(id, w.c.nodes[w.via[k%len(w.via)]], name, mode) // each agent in turn
	}
}

// reason shortens a refusal for the summary: the exit code and the
// error's code word.
func reason(why string) string {
	if i := strings.Index(why, ":"); i > 0 && strings.HasPrefix(why, "exit ") {
		return why[:i]
	}
	return why
}

func (w *workload) cliOnce(id int, n *faultNode, name string, mode semaphore.Mode) {
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, binary, "lock", name, "--api", n.sock, "--mode", mode.String(), "--timeout", "2s",
		"--duration", "4s", "--quiet", "20ms", "--", "sh", "-c", `echo "granted $SLUICE_TOKEN"; sleep 0.02; echo ended`)
	cmd.Env = os.Environ()
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		return
	}
	op := histOp{client: id, name: name, mode: mode, via: "cli", call: w.rec.now()}
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		op.ret, op.outcome, op.why = w.rec.now(), unknown, err.Error()
		w.rec.add(op)
		return
	}
	var grantSeen, endSeen time.Duration
	s := bufio.NewScanner(out)
	for s.Scan() {
		switch line := s.Text(); {
		case strings.HasPrefix(line, "granted "):
			grantSeen = w.rec.now()
			op.token, _ = strconv.ParseUint(strings.TrimPrefix(line, "granted "), 10, 64)
		case line == "ended":
			endSeen = w.rec.now()
		}
	}
	err = cmd.Wait()
	done := w.rec.now()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	switch {
	case grantSeen > 0:
		op.ret, op.outcome = grantSeen, granted
		w.rec.add(op)
		if endSeen == 0 {
			endSeen = done // cut short (SIGTERM on a lost lease): it stopped by the exit
		}
		w.rec.add(histOp{client: id, name: name, mode: mode, end: true, call: op.call, ret: endSeen, token: op.token, via: "cli"})
	case code == 75 || code == 69 && strings.Contains(errb.String(), "not ready"):
		op.ret, op.outcome, op.why = done, refused, fmt.Sprintf("exit %d: %s", code, strings.TrimSpace(errb.String()))
		w.rec.add(op)
	default:
		op.ret, op.outcome, op.why = done, unknown, fmt.Sprintf("exit %v: %s", err, strings.TrimSpace(errb.String()))
		w.rec.add(op)
	}
	if grantSeen == 0 && code != 75 {
		time.Sleep(50 * time.Millisecond) // the agent is gone or not ready: do not spin
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// probeNames checks liveness after the faults: every name is granted
// through every agent of which within bound, and released.
func probeNames(t *testing.T, c *faultCluster, names []string, which ...int) {
	t.Helper()
	if len(which) == 0 {
		which = c.running()
	}
	for _, i := range which {
		for _, name := range names {
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			l, err := c.nodes[i].cl.Acquire(ctx, name, semaphore.Exclusive, client.Options{Timeout: bound - 5*time.Second})
			if err != nil {
				cancel()
				t.Fatalf("after the faults, %s through agent %d: %v", name, i+1, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Logf("after the faults, release of %s through agent %d: %v", name, i+1, err)
			}
			cancel()
		}
	}
}

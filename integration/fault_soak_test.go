package integration

import (
	"flag"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

var soak = flag.Duration("soak", 0, "run TestSoak for this long: the mixed workload with a random fault every 10 s (0: skipped)")

// TestSoak (-soak=10m) runs the mixed workload on five agents with a random
// fault every 10 s: a leader or any node killed and restarted, a node paused
// and resumed, or (as root) a random partition healed. It prints grants per
// second, refusals by reason and porcupine's verdict, and runs every check
// of the fault tests at the end.
func TestSoak(t *testing.T) {
	if *soak <= 0 {
		t.Skip("the soak runs with -soak=DURATION")
	}
	r := newFaultRun(t, labSkip() == "")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	end := time.Now().Add(*soak)
	faults := map[string]int{}
	for time.Now().Before(end) {
		r.run(5 * time.Second)
		victim := rng.IntN(len(r.c.nodes))
		if rng.IntN(2) == 0 {
			victim = r.c.leaders(r.c.others(victim)[0])[0]
		}
		switch k := rng.IntN(3); {
		case k == 0:
			faults["kill"]++
			r.c.kill(victim)
			r.run(5 * time.Second)
			r.c.start(victim)
		case k == 1:
			faults["pause"]++
			r.c.signal(victim, syscall.SIGSTOP)
			r.run(5 * time.Second)
			r.c.signal(victim, syscall.SIGCONT)
		case r.c.lab != nil:
			faults["partition"]++
			r.c.lab.partition(rng.Perm(len(r.c.nodes))[:1+rng.IntN(2)]...)
			r.run(5 * time.Second)
			r.c.lab.heal()
		default:
			faults["none"]++
			r.run(5 * time.Second)
		}
		r.c.waitReady()
	}
	t.Logf("faults: %v", faults)
	r.finish()
}

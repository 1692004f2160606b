package core_test

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/mutation"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
)

// The schedule explorer drives the scripted scenarios' cluster (harness)
// with random schedules instead of a script: at each step it delivers,
// drops or duplicates one in-flight message picked at random, ticks the
// clocks, starts a request, releases a holder, or crashes and restarts a
// leader. The integration simulator draws delays and faults per link and
// per tick, so the messages of one request mostly arrive in the order
// they were sent; here any message may wait for any number of others, so
// the orders the doorway rules guard (a mark that arrives after a
// reader's ticket at one leader and before it at another, reports lost
// to one master and not another, a phase message that arrives after the
// request moved on) come up within a few hundred or thousand seeds. Two
// kinds of race line up the rarer ones on purpose: a markRace around a
// soft writer's activation, a watchRace around a master's new watch of a
// leader while a request of it adds its ticket. It
// checks what a client sees, on every grant: on each name at most one
// writer and no reader beside it, readers' limits counted with every page
// view, and fencing tokens above every earlier writer's (above every
// earlier grant's for a hard writer). A settle ends each run: the faults
// stop, the messages held back till then arrive, holders let go, and
// every request must be answered within settleBound ticks.
//
// The nested world (TestExploreNested) takes names of a small tree
// (exploreTree), each with its ancestors as parents. There a token and
// a limit are a name's, and two holders whose names nest must not
// conflict (wire.Conflicts): a reader of /s beside a writer of /s/a is
// as wrong as two writers of /s. Its patient worlds wait past any
// timeout, so a cycle of waits across names lasts into the settle.
//
// What it does not model: elections and handoffs (the view is fixed),
// clocks that drift apart, crashes of the clients' own agents, a disk
// that loses lazy writes, force-unlocks, and renewals (leases outlast the
// run, page views excepted). The integration simulator covers those.

var (
	exploreSeeds     = flag.Int("explore-seeds", 2000, "seeds of the schedule explorer (TestExplore)")
	exploreSeed      = flag.Int64("explore-seed", 0, "replay this seed of the schedule explorer, with its trace")
	exploreMutant    = flag.Uint64("explore-mutant", 0, "with -explore-seed or -explore-nested-seed: replay on this mutant (core.Mutant bits)")
	exploreScenario  = flag.String("explore-scenario", "", "with -explore-seed or -explore-nested-seed: write the failure, cut to the steps it needs, to this scenario file")
	exploreFull      = flag.Bool("explore-full", false, "TestExploreCatchesMutants searches every mutant from seed 1, not from the seed that caught it last")
	exploreKeepGoing = flag.Bool("explore-keep-going", false, "TestExplore and TestExploreNested run every seed, reporting each that fails, instead of stopping at the first")

	exploreNestedSeeds = flag.Int("explore-nested-seeds", 1000, "seeds of the nested names' explorer (TestExploreNested)")
	exploreFrom        = flag.Int64("explore-from", 1, "the first seed TestExplore and TestExploreNested run: a long hunt goes on where the last one stopped")
	exploreNestedSeed  = flag.Int64("explore-nested-seed", 0, "replay this seed of the nested names' explorer, with its trace")
)

// exploreOptions are one explorer world.
type exploreOptions struct {
	seed   int64
	mutant core.Mutant
	// steps is how many actions a run takes at most (default 5000).
	steps int
	// requests is how many requests the clients make in a run (default:
	// drawn from the seed, 2 to 7).
	requests int
	// share turns shared read tickets on (Config.ShareLease ticks).
	share int64
	// restarts lets leaders crash and restart from their disks.
	restarts bool
	// readers: every request is a reader's (a third of them limited).
	readers bool
	// modes, when set, are the modes requests take (default: a subset
	// drawn from the seed).
	modes []wire.Mode
	// clients, when set, are the nodes clients ask on (default
	// clientNodes).
	clients []int
	// nested: requests take a name of exploreTree, with its ancestors as
	// parents, instead of the one name "a".
	nested bool
	// patient: a request that may wait waits past the run's end, so a
	// cycle of waits outlasts the faults and the settle finds it
	// instead of a timeout breaking it.
	patient bool
	// trace records every action, for a failure's report.
	trace bool
	// plain: the nodes with the plain doorway (Config.PlainDoorway), as
	// the scenario's cluster plain= takes them ("all", "3,5"; "": none).
	plain string
	// choosing replaces the semaphore's ChoosingMatters: a broken word on
	// doorways, for the mutation tests.
	choosing core.ChoosingMatters
}

// exploreHold is a grant a client still holds.
type exploreHold struct {
	req    wire.RequestID
	node   int
	name   string
	mode   wire.Mode
	limit  int
	token  uint64
	expiry int64
}

// explorer is one run.
type explorer struct {
	t   *testing.T
	o   exploreOptions
	h   *harness
	rng *rand.Rand
	// tick is every node's clock: the nodes tick together.
	tick int64
	// stops counts the graceful stops of a node's shares (StopSharing).
	stops int
	// asked are the requests made, by id: their mode, limit, and the tick
	// of the Acquire call.
	asked map[wire.RequestID]exploreAsk
	holds []exploreHold
	// lastTok and lastWTok are, per name, the highest token granted and
	// the highest writer's token granted: a token is a name's.
	lastTok  map[string]uint64
	lastWTok map[string]uint64
	failure  string
	trace    []string
	// script replays the run in the scenario language (with trace);
	// settleScript replays its settle.
	script, settleScript []string
	// pending is the request being made while a script replays, and
	// pendingAnswered whether it was granted or failed in the call.
	pending         *exploreAsk
	pendingAnswered bool
	// open are the requests made and not yet granted or failed.
	open map[wire.RequestID]bool
	// settleTicks is how long the settle took (see settle).
	settleTicks int64
	// grants counts the grants checked; meets those that met a holder
	// of a name nesting with theirs in a mode that shares with theirs.
	grants, meets int
	// at is, for each in-flight message (in the harness's order), the
	// step it arrives after; slow are the links slow until linksUntil,
	// and by how much.
	at         []int
	slow       map[[2]wire.NodeID]int
	linksUntil int
	// reportLoss are the links on which reports are lost until
	// linksUntil, and how often (percent): a leader's full send queue to
	// one master drops whatever frame meets it, and reports are most of
	// its frames.
	reportLoss map[[2]wire.NodeID]int
	race       markRace
	wrace      watchRace
	// modes are the modes this seed's requests take.
	modes []wire.Mode
	// releaseRate is how likely a step releases a holder (per 1000).
	releaseRate int
	// restartRate is how likely a step crashes a leader or restarts
	// the one that is down (per 1000, with exploreOptions.restarts).
	restartRate int
}

type exploreAsk struct {
	name  string
	mode  wire.Mode
	limit int
	at    int64
}

// clientNodes host the clients: the two nodes that do not lead, and one
// leader (a master whose own replica answers at once), which therefore
// never crashes.
var clientNodes = []int{4, 5, 1}

func explore(t *testing.T, o exploreOptions) (failure string, trace []string) {
	t.Helper()
	x := run(t, o)
	return x.failure, x.trace
}

// run is one run of the explorer.
func run(t *testing.T, o exploreOptions) *explorer {
	t.Helper()
	if o.steps == 0 {
		o.steps = 5000
	}
	x := newExplorer(t, o)
	x.rng = rand.New(rand.NewPCG(uint64(o.seed), 0x5eed))
	x.h.quiet = !o.trace
	// Swarm: each seed has its own few requests and modes. Few requests
	// meet in more ways: a crowd's stray flags keep each other in line.
	if x.o.requests == 0 {
		x.o.requests = 2 + x.rng.IntN(6)
	}
	if x.o.readers {
		x.modes = []wire.Mode{wire.ModeReadOnly}
	}
	x.modes = append(x.modes, x.o.modes...)
	for len(x.modes) == 0 {
		for _, m := range exploreModes {
			if x.rng.IntN(2) == 0 {
				x.modes = append(x.modes, m)
			}
		}
	}
	// Holders let go at a rate of their own: long holds are what a
	// late mark or a late report must meet.
	x.releaseRate = []int{3, 10, 50}[x.rng.IntN(3)]
	x.restartRate = []int{10, 40}[x.rng.IntN(2)]
	o = x.o
	x.setup(t)
	started := 0
	for step := 0; step < o.steps && x.failure == ""; step++ {
		x.stamp(step)
		busy := x.due()
		if !busy && started == o.requests && len(x.holds) == 0 {
			break
		}
		switch r := x.rng.IntN(1000); {
		case x.race.arrive && step < x.race.until && x.rng.IntN(10) == 0:
			x.race.arrive = false
			x.tracef("a client arrives in the race")
			x.acquire(x.race.node, true)
		case x.wrace.arrive && step < x.wrace.until && x.rng.IntN(10) == 0:
			x.wrace.arrive = false
			x.tracef("a client arrives in the watch race")
			x.acquire(x.wrace.node, false)
		case r < 800 && busy:
			m := x.take()
			if m.Kind == wire.KindReport && x.rng.IntN(100) < x.reportLoss[[2]wire.NodeID{m.From, m.To}] || x.raceLost(m, step) ||
				x.wraceLost(m, step) {
				x.tracef("lose %s", fmtMsg(m))
				x.record("drop %s", x.filter(m))
				break
			}
			x.tracef("deliver %s", fmtMsg(m))
			x.record("deliver %s", x.filter(m))
			x.deliver(m)
		case r < 830 && busy:
			m := x.take()
			x.tracef("drop %s", fmtMsg(m))
			x.record("drop %s", x.filter(m))
		case r < 840 && busy:
			m := x.h.inflight[x.rng.IntN(len(x.h.inflight))]
			x.tracef("duplicate %s", fmtMsg(m))
			x.record("dup %s", x.filter(m))
			x.h.inflight = append(x.h.inflight, m)
			x.stamp(step)
		case r < 870 || !busy && r < 900:
			x.tick++
			x.tracef("tick %d", x.tick)
			x.record("tick")
			x.tickAll()
		case r == 900 && x.o.share > 0 && x.rng.IntN(4) == 0:
			x.stopSharing()
		case r < 930 && started < o.requests:
			started++
			x.acquire(0, false)
		case r >= 930 && r < 930+x.releaseRate && len(x.holds) > 0:
			x.release()
		case r >= 1000-x.restartRate && o.restarts:
			x.crashOrRestart(t)
		}
		x.h.out.Reset()
		x.nestingLost()
	}
	if x.failure == "" {
		x.settle(t)
	}
	return x
}

// deliver delivers m. In the nested world a node's panic fails the seed
// with its replay, rather than the whole test: a nested request's turn
// in masterRestarted once ended its parents under the walk.
func (x *explorer) deliver(m wire.Message) {
	if x.o.nested {
		defer func() {
			if p := recover(); p != nil {
				x.tracef("node %d panicked: %v\n%s", m.To, p, debug.Stack())
				x.nestingLost()
				x.fail("node %d panicked on %s: %v", m.To, fmtMsg(m), p)
			}
		}()
	}
	x.h.deliver(m)
}

// nestingLost fails the run where a node's request no longer goes with
// its parents' tickets (Node.NestingLost): at once, where what follows
// (a grant beside a conflicting holder of a parent, a wait for ever, a
// parent's ticket held for no one) would show later and further from
// its cause.
func (x *explorer) nestingLost() {
	if !x.o.nested || x.failure != "" {
		return
	}
	for i, n := range x.h.nodes {
		if n.core == nil {
			continue
		}
		if s := n.core.NestingLost(); s != "" {
			x.fail("nesting lost: node %d: %s", i+1, s)
			return
		}
	}
}

// A staleMark is a soft writer's ticket that a restarted leader still
// takes as active while the writer's master waits with it unmarked. A
// leader restored from its disk takes a soft writer's ticket as active
// until the master says otherwise (mayBeActive), and the master says so
// on the leader's restart announcement (masterRestarted) and again at
// every report of that leader that shows it (correctMarks); without the
// latter (MutantStaleRestoredMark) a lost announcement or mark leaves it, and later readers and intents
// wait for the mark, and the soft writer for them, until a timeout. A
// stall names the stale marks it finds.
type staleMark struct {
	leader wire.NodeID
	req    wire.RequestID
	name   string
}

func (sm staleMark) String() string {
	return fmt.Sprintf("leader %d takes %s on %s as active since its restart, its master waits unmarked", sm.leader,
		sm.req, sm.name)
}

// staleMarks are the stale marks (staleMark) at the leaders: asked when
// the settle stalls, every message sent having arrived, so they stay.
func (x *explorer) staleMarks() []staleMark {
	var out []staleMark
	for l := 1; l <= 3; l++ {
		n := x.h.nodes[l-1].core
		if n == nil {
			continue
		}
		for _, name := range x.names() {
			for _, id := range n.AssumedActive(name) {
				if m := x.h.nodes[id.Node-1].core; m != nil && m.SoftWaiting(id) {
					out = append(out, staleMark{leader: wire.NodeID(l), req: id, name: name})
				}
			}
		}
	}
	return out
}

func newExplorer(t *testing.T, o exploreOptions) *explorer {
	x := &explorer{t: t, o: o, h: &harness{mutant: o.mutant}, asked: map[wire.RequestID]exploreAsk{},
		open: map[wire.RequestID]bool{}, slow: map[[2]wire.NodeID]int{}, reportLoss: map[[2]wire.NodeID]int{},
		lastTok: map[string]uint64{}, lastWTok: map[string]uint64{}}
	x.h.onEvent = x.event
	return x
}

func (x *explorer) setup(t *testing.T) {
	h := x.h
	h.view = wire.View{Epoch: 1, Leaders: []wire.NodeID{1, 2, 3}}
	peers := []wire.NodeID{1, 2, 3, 4, 5}
	h.cfg = core.Config{View: h.view, Peers: peers, TryTicks: 20, Mutant: x.o.mutant, CheckIncremental: true,
		ShareLease: x.o.share, Admit: semaphore.Admit, RefuseEarly: semaphore.RefuseEarly,
		ChoosingMatters: semaphore.ChoosingMatters}
	if x.o.choosing != nil {
		h.cfg.ChoosingMatters = x.o.choosing
	}
	h.isolated, h.cut = map[wire.NodeID]bool{}, map[[2]wire.NodeID]bool{}
	h.plain = nodeSet(x.o.plain, len(peers))
	for i := range peers {
		h.nodes = append(h.nodes, &hnode{disk: core.NewDurable()})
		h.start(t, i+1)
	}
	h.inflight = nil
}

// record adds a command of the scenario language that replays the step.
func (x *explorer) record(format string, args ...any) {
	if x.o.trace {
		x.script = append(x.script, fmt.Sprintf(format, args...))
	}
}

// filter is msgFilter(m), with m's digest where another message in
// flight passes the same filter: a replay takes m, not a retransmission
// of it with another lifetime or a report with other entries.
func (x *explorer) filter(m wire.Message) string {
	if !x.o.trace {
		return "" // nothing records it
	}
	f := msgFilter(m)
	cmd, args, err := datadriven.ParseLine("deliver " + f)
	if err != nil {
		x.t.Fatalf("%q: %v", f, err)
	}
	d := &datadriven.TestData{Cmd: cmd, CmdArgs: args}
	for _, o := range x.h.inflight {
		if x.h.matches(x.t, d, o) && msgSum(o) != msgSum(m) {
			return strings.TrimSuffix(f, " count=1") + " sum=" + msgSum(m) + " count=1"
		}
	}
	return f
}

// msgFilter is the scenario filter that picks m out of the in-flight
// messages (one like it, if it was sent twice).
func msgFilter(m wire.Message) string {
	s := fmt.Sprintf("from=%d to=%d kind=%s", m.From, m.To, m.Kind)
	if m.Name != "" {
		s += " name=" + m.Name
	}
	if m.Req != (wire.RequestID{}) {
		s += " req=" + m.Req.String()
	}
	if m.Ticket != 0 {
		s += fmt.Sprintf(" t=%d", m.Ticket)
	}
	if m.WatchSeq != 0 {
		s += fmt.Sprintf(" watch=%d", m.WatchSeq)
	}
	if m.Kind == wire.KindReport {
		s += fmt.Sprintf(" seq=%d since=%d", m.ReportSeq, m.BaseSeq)
	}
	if strings.HasSuffix(m.Kind.String(), "-ack") {
		s += fmt.Sprintf(" inc=%d high-water=%d reject=%d", m.Incarnation, m.HighWater, map[bool]int{true: 1}[m.Reject])
	}
	return s + " count=1"
}

func (x *explorer) tracef(format string, args ...any) {
	if x.o.trace {
		x.trace = append(x.trace, fmt.Sprintf(format, args...))
	}
}

// stamp gives each message sent since the last step its arrival: the
// step after which it is delivered. Most take a few steps; a link may be
// slow for a while (ten or a hundred times), and any message may be late
// on its own, so one of a request's messages can arrive after the
// request moved on, or after another's whole doorway.
func (x *explorer) stamp(step int) {
	if step >= x.linksUntil {
		x.linksUntil = step + 200 + x.rng.IntN(800)
		clear(x.slow)
		clear(x.reportLoss)
		for range x.rng.IntN(4) {
			from, to := wire.NodeID(1+x.rng.IntN(5)), wire.NodeID(1+x.rng.IntN(5))
			x.slow[[2]wire.NodeID{from, to}] = []int{10, 100}[x.rng.IntN(2)]
		}
		if x.rng.IntN(2) == 0 {
			to := wire.NodeID(1 + x.rng.IntN(5))
			for from := range wire.NodeID(3) {
				if x.rng.IntN(3) != 0 {
					x.reportLoss[[2]wire.NodeID{from + 1, to}] = 50 + x.rng.IntN(50)
				}
			}
		}
	}
	for _, m := range x.h.inflight[len(x.at):] {
		x.springRace(m, step)
		x.springWatchRace(m, step)
		d := 1 + x.rng.IntN(5) + x.raceDelay(m, step)
		if x.wraceLate(m, step) {
			d += 20 + x.rng.IntN(80)
		}
		if x.wraceFast(m, step) {
			x.at = append(x.at, step+1)
			continue
		}
		switch r := x.rng.IntN(1000); {
		case r < 5:
			// Held until the faults stop: it arrives after its request
			// ended and the tombstones of it are gone.
			d = heldBack
		case r < 100:
			d += x.rng.IntN(300)
		case r < 300:
			d += x.rng.IntN(30)
		}
		if f := x.slow[[2]wire.NodeID{m.From, m.To}]; f > 0 && d < heldBack {
			d *= f
		}
		x.at = append(x.at, step+d)
	}
}

// A markRace is faults sprung by a soft writer's activation mark, the
// meeting its rules are for: a reader's doorway that goes through
// between the writer's look and its mark. Until until: the writer's
// messages to some leaders are late (its mark arrives after a reader's
// ticket there), some leaders' reports to it are lost (it decides on
// what it read before, or on the others), and everyone else's messages
// to one leader, odd, are late (odd hears of a reader after the mark).
// A client arrives while it is on: the reader the mark must meet.
//
// Half the races deal the leaders three roles in one draw instead: one
// the writer is deaf to and whose mark is late, one the reader reaches
// late (odd), and one, slow, where the writer's messages are late and
// the reader's flag arrives on time but its ticket later still.
type markRace struct {
	node, odd, slow wire.NodeID
	until           int
	// late and deaf are the leaders the writer's messages to are late
	// and whose reports to it are lost.
	late, deaf [4]bool
	// arrive: a client is yet to arrive.
	arrive bool
}

// springRace may spring a mark race at m, sent at step.
func (x *explorer) springRace(m wire.Message, step int) {
	if m.Kind != wire.KindActivate || m.Reject || step < x.race.until || x.rng.IntN(2) != 0 {
		return
	}
	r := markRace{node: m.From, odd: wire.NodeID(1 + x.rng.IntN(3)), until: step + 100 + x.rng.IntN(300), arrive: true}
	if x.rng.IntN(2) == 0 {
		roles := x.rng.Perm(3)
		deaf, odd, slow := wire.NodeID(roles[0]+1), wire.NodeID(roles[1]+1), wire.NodeID(roles[2]+1)
		r.odd, r.slow = odd, slow
		r.late[deaf], r.deaf[deaf], r.late[slow] = true, true, true
	} else {
		for l := 1; l <= 3; l++ {
			r.late[l] = wire.NodeID(l) != r.odd && x.rng.IntN(4) != 0 || x.rng.IntN(4) == 0
			r.deaf[l] = x.rng.IntN(2) == 0
		}
	}
	x.race = r
	x.tracef("mark race around node %d, leader %d odd, leader %d slow, until step %d, late %v, deaf %v", r.node,
		r.odd, r.slow, r.until, r.late[1:], r.deaf[1:])
}

// raceDelay is how much later than its draw m arrives in a mark race.
func (x *explorer) raceDelay(m wire.Message, step int) int {
	r := x.race
	switch {
	case step >= r.until:
		return 0
	case m.From == r.node:
		if m.To <= 3 && r.late[m.To] {
			return 20 + x.rng.IntN(80)
		}
	case m.To == r.slow:
		// The reader's flag on time, its ticket after the writer's
		// watch there.
		if m.Kind != wire.KindEnter {
			return 100 + x.rng.IntN(100)
		}
	case m.To == r.odd || m.To <= 3 && x.rng.IntN(4) == 0:
		// And now and then any other phase message: a reader's ticket
		// that reaches one leader after its doorway reached another.
		return 20 + x.rng.IntN(80)
	}
	return 0
}

func (x *explorer) raceLost(m wire.Message, step int) bool {
	r := x.race
	return step < r.until && m.Kind == wire.KindReport && m.To == r.node && m.From <= 3 && r.deaf[m.From]
}

// A watchRace is faults sprung by a master's new watch of one leader
// (rewatch: a report came as changes to one it never had), the meeting
// the ticket check of fresh is for. The leader's answer echoes the
// master's latest watch number, which a request of it still adding its
// ticket also carries: a report that may lack that ticket, and a doorway
// that enters the leader after it. Until until: the rewatch and its
// answer arrive at once, and the leader's later reports to the master
// are lost, so the master keeps the answer; the other leaders' reports
// to it are late, as are its messages to some leaders (its ticket
// reaches one late); and another client arrives, whose messages to one
// other leader, odd, are late (its doorway is missing there).
type watchRace struct {
	node, leader, odd wire.NodeID
	seq               uint64
	until             int
	answered          bool
	answer            uint64 // the answer's report sequence
	late              [4]bool
	arrive            bool
}

// springWatchRace may spring a watch race at m, sent at step: a watch
// of a leader whose mark is below the number of a request of the
// master's that is adding its ticket (so a doorway that reads there may
// draw a lower one). The roles follow the leaders' marks: the leaders
// with lower marks than the ticket, other than the watched one, get the
// master's messages late (its ticket arrives after another's); one with
// a mark as high as the ticket is odd (the arriving client's doorway
// reaches it late, after its report to the master).
func (x *explorer) springWatchRace(m wire.Message, step int) {
	if m.Kind != wire.KindWatch || m.To > 3 || m.To == m.From || step < x.wrace.until {
		return
	}
	ticket := x.addingTicket(m.From, m.Name)
	var marks [4]uint64
	for l := 1; l <= 3; l++ {
		if n := x.h.nodes[l-1].core; n != nil {
			_, marks[l] = n.Table(m.Name)
		}
	}
	if ticket == 0 || marks[m.To]+1 >= ticket || x.rng.IntN(2) != 0 {
		return
	}
	r := watchRace{node: m.From, leader: m.To, seq: m.WatchSeq, until: step + 100 + x.rng.IntN(300), arrive: true}
	for l := 1; l <= 3; l++ {
		switch {
		case wire.NodeID(l) == r.leader:
		case marks[l]+1 < ticket:
			r.late[l] = true
		case r.odd == 0:
			r.odd = wire.NodeID(l)
		}
	}
	x.wrace = r
	// What is already on its way goes late too: the master's tickets to
	// the late leaders, the other leaders' reports to it.
	for i, f := range x.h.inflight[:len(x.at)] {
		if x.at[i] < heldBack && (f.From == r.node && f.To <= 3 && (r.late[f.To] || x.wraceTicket(f)) ||
			f.To == r.node && f.Kind == wire.KindReport && f.From != r.leader) {
			x.at[i] += 20 + x.rng.IntN(80)
		}
	}
	x.tracef("watch race around node %d and leader %d, leader %d odd, until step %d, late %v (ticket %d, marks %v)",
		r.node, r.leader, r.odd, r.until, r.late[1:], ticket, marks[1:])
}

// addingTicket is the number of a request of node adding its ticket on
// name (0: none).
func (x *explorer) addingTicket(node wire.NodeID, name string) uint64 {
	if n := x.h.nodes[node-1].core; n != nil {
		for _, r := range n.Requests() {
			if r.Phase == "add-ticket" && r.Name == name {
				return r.Ticket
			}
		}
	}
	return 0
}

// wraceFast: m is the rewatch, or the leader's answer to it.
func (x *explorer) wraceFast(m wire.Message, step int) bool {
	r := &x.wrace
	switch {
	case step >= r.until:
		return false
	case m.Kind == wire.KindWatch && m.From == r.node && m.To == r.leader && m.WatchSeq == r.seq:
		return true
	case m.Kind == wire.KindReport && m.From == r.leader && m.To == r.node && !r.answered && m.WatchSeq >= r.seq &&
		m.BaseSeq == 0:
		r.answered, r.answer = true, m.ReportSeq
		return true
	}
	return false
}

func (x *explorer) wraceLate(m wire.Message, step int) bool {
	r := x.wrace
	switch {
	case step >= r.until:
		return false
	case m.From == r.node:
		return m.To <= 3 && (r.late[m.To] || x.wraceTicket(m))
	case m.To == r.node:
		return m.Kind == wire.KindReport && m.From != r.leader
	default:
		return m.To == r.odd
	}
}

// wraceTicket: m is the master's ticket to the watched leader, which
// arrives after the leader's answer.
func (x *explorer) wraceTicket(m wire.Message) bool {
	return m.Kind == wire.KindAddTicket && m.From == x.wrace.node && m.To == x.wrace.leader
}

// wraceLost: a report of the leader to the master, after its answer.
func (x *explorer) wraceLost(m wire.Message, step int) bool {
	r := x.wrace
	return step < r.until && r.answered && m.Kind == wire.KindReport && m.From == r.leader && m.To == r.node &&
		m.ReportSeq > r.answer
}

// heldBack is the arrival of a message held until the settle.
const heldBack = math.MaxInt / 2

// due reports whether a message not held back is in flight.
func (x *explorer) due() bool {
	return slices.ContainsFunc(x.at, func(at int) bool { return at < heldBack })
}

// take removes the in-flight message due first and returns it.
func (x *explorer) take() wire.Message {
	i := 0
	for j, at := range x.at {
		if at < x.at[i] {
			i = j
		}
	}
	m := x.h.inflight[i]
	x.h.inflight = slices.Delete(x.h.inflight, i, i+1)
	x.at = slices.Delete(x.at, i, i+1)
	return m
}

// exploreModes are the modes a request takes, readers twice as often.
var exploreModes = []wire.Mode{wire.ModeReadOnly, wire.ModeReadOnly, wire.ModeReadWritePriority, wire.ModeReadWrite,
	wire.ModeReadWriteGentle, wire.ModeExclusive}

// acquire starts a request on a client node other than not; a reader's
// if reader, else in one of the seed's modes.
func (x *explorer) acquire(not wire.NodeID, reader bool) {
	clients := clientNodes
	if len(x.o.clients) > 0 {
		clients = x.o.clients
	}
	node := clients[x.rng.IntN(len(clients))]
	for wire.NodeID(node) == not {
		node = clients[x.rng.IntN(len(clients))]
	}
	n := x.h.nodes[node-1]
	if n.core == nil {
		return
	}
	a := core.Acquire{Name: "a", Mode: x.modes[x.rng.IntN(len(x.modes))], Duration: 1 << 30, Grace: 10}
	if x.o.nested {
		a.Name = exploreTree[x.rng.IntN(len(exploreTree))]
		a.Parents = parentsOf(a.Name)
	}
	if reader {
		a.Mode = wire.ModeReadOnly
	}
	switch x.rng.IntN(8) {
	case 0:
		a.Timeout = 0 // a try
	case 1:
		a.Timeout = 5 + x.rng.Int64N(60) // may give up while in line
	default:
		// Patient, yet not for ever: a choosing flag a lost message left
		// at a replica holds everyone up until its deadline.
		a.Timeout = 100 + x.rng.Int64N(200)
		if x.o.patient {
			a.Timeout = 1 << 20
		}
	}
	if a.Mode == wire.ModeReadOnly && x.rng.IntN(3) == 0 {
		a.Limit = 1 + x.rng.IntN(2)
	}
	if a.Mode == wire.ModeReadWriteGentle {
		a.Quiet = x.rng.Int64N(5)
	}
	id, err := n.core.Acquire(a)
	if err != nil {
		x.tracef("acquire on node %d: %v", node, err)
		return
	}
	x.asked[id] = exploreAsk{name: a.Name, mode: a.Mode, limit: a.Limit, at: x.tick}
	x.open[id] = true
	x.tracef("node %d acquires %s: %s %s limit %d timeout %d", node, id, a.Name, a.Mode, a.Limit, a.Timeout)
	x.record("%s", acquireCmd(node, a))
	x.h.ready(node)
}

// acquireCmd is the scenario command that makes a on node.
func acquireCmd(node int, a core.Acquire) string {
	s := fmt.Sprintf("acquire node=%d name=%s mode=%s timeout=%d duration=%d grace=%d quiet=%d limit=%d", node, a.Name,
		a.Mode, a.Timeout, a.Duration, a.Grace, a.Quiet, a.Limit)
	if len(a.Parents) > 0 {
		s += " parents=" + strings.Join(a.Parents, ",")
	}
	return s
}

// exploreTree are the nested world's names, in byte order: a root, two
// children, and a grandchild, whose request takes two parents (the
// order MutantParentsInnermostFirst breaks).
var exploreTree = []string{"/s", "/s/a", "/s/a/x", "/s/b"}

// parentsOf is name's ancestors in exploreTree, outermost first.
func parentsOf(name string) []string {
	var ps []string
	for _, p := range exploreTree {
		if strings.HasPrefix(name, p+"/") {
			ps = append(ps, p)
		}
	}
	return ps
}

// nests: one of a and b is the other or an ancestor of it.
func nests(a, b string) bool {
	return a == b || strings.HasPrefix(b, a+"/") || strings.HasPrefix(a, b+"/")
}

// names are the names the world's requests take.
func (x *explorer) names() []string {
	if x.o.nested {
		return exploreTree
	}
	return []string{"a"}
}

func (x *explorer) release() {
	i := x.rng.IntN(len(x.holds))
	hd := x.holds[i]
	x.holds = slices.Delete(x.holds, i, i+1)
	n := x.h.nodes[hd.node-1]
	x.tracef("node %d releases %s", hd.node, hd.req)
	if n.core == nil {
		return
	}
	x.record("release node=%d req=%s name=%s", hd.node, hd.req, hd.name)
	if err := n.core.Release(hd.req, hd.name); err != nil {
		x.tracef("release: %v", err)
	}
	x.h.ready(hd.node)
}

// stopSharing begins a graceful stop of a client node: it lets its shares
// go (now, or when their last reader leaves) and serves on, its readers
// taking the whole bakery.
func (x *explorer) stopSharing() {
	node := clientNodes[x.rng.IntN(len(clientNodes))]
	if len(x.o.clients) > 0 {
		node = x.o.clients[x.rng.IntN(len(x.o.clients))]
	}
	n := x.h.nodes[node-1]
	if n.core == nil {
		return
	}
	x.stops++
	x.tracef("node %d stops sharing", node)
	x.record("stop-sharing node=%d", node)
	n.core.StopSharing()
	x.h.ready(node)
}

// crashOrRestart crashes a leader that is up (one at a time) or restarts
// the one that is down, from its disk.
func (x *explorer) crashOrRestart(t *testing.T) {
	for i := range 3 {
		if x.h.nodes[i].core == nil {
			x.tracef("leader %d restarts", i+1)
			x.record("restart node=%d", i+1)
			x.h.start(t, i+1)
			return
		}
	}
	if x.rng.IntN(4) != 0 {
		return
	}
	// Leaders 2 and 3: leader 1 hosts clients, whose agent's crash the
	// explorer does not model (a master's crash leaves its requests'
	// copies for their lifetimes, which outlast the run).
	i := 1 + x.rng.IntN(2)
	x.tracef("leader %d crashes", i+1)
	x.record("crash node=%d", i+1)
	x.h.nodes[i].core = nil
}

// event keeps the holds and checks every grant against them.
func (x *explorer) event(node int, e core.Event) {
	x.tracef("node %d: %s %s token=%d shared=%v code=%s", node, e.Kind, e.Req, e.Token, e.Shared, e.Code)
	switch e.Kind {
	case core.EventGranted:
		ask, ok := x.asked[e.Req]
		if !ok && x.pending != nil {
			ask, ok = *x.pending, true
			x.asked[e.Req] = ask
			x.pendingAnswered = true
		}
		if !ok {
			x.fail("grant of %s, a request nobody made", e.Req)
			return
		}
		delete(x.open, e.Req)
		if e.Name != ask.name {
			x.fail("%s granted on %s, asked for %s", e.Req, e.Name, ask.name)
		}
		x.grant(exploreHold{req: e.Req, node: node, name: ask.name, mode: ask.mode, limit: ask.limit, token: e.Token,
			expiry: ask.at + e.TTL})
	case core.EventFailed:
		if _, ok := x.asked[e.Req]; !ok && x.pending != nil {
			x.pendingAnswered = true
		}
		delete(x.open, e.Req)
	case core.EventUnlocking, core.EventUnlocked:
		x.holds = slices.DeleteFunc(x.holds, func(hd exploreHold) bool { return hd.req == e.Req })
	case core.EventReleased:
		// Given up: a replayed script may release a request before its
		// grant.
		delete(x.open, e.Req)
	}
}

func (x *explorer) fail(format string, args ...any) {
	if x.failure == "" {
		x.failure = fmt.Sprintf(format, args...)
		x.tracef("FAIL: %s", x.failure)
	}
}

func (x *explorer) grant(g exploreHold) {
	// Holds whose lease ran out on the clock are over.
	x.holds = slices.DeleteFunc(x.holds, func(hd exploreHold) bool { return hd.expiry <= x.tick })
	hard := g.mode == wire.ModeExclusive || g.mode == wire.ModeReadWritePriority
	last := x.lastWTok[g.name]
	if hard {
		last = x.lastTok[g.name]
	}
	if g.token <= last {
		x.fail("%s granted %s on %s token %d, not above the previous %d", g.req, g.mode, g.name, g.token, last)
	}
	x.lastTok[g.name] = max(x.lastTok[g.name], g.token)
	if g.mode != wire.ModeReadOnly {
		x.lastWTok[g.name] = g.token
	}
	x.holds = append(x.holds, g)
	x.grants++
	x.nestedMeets(g)
	for _, name := range x.names() {
		var writers, readers []string
		for _, hd := range x.holds {
			if hd.name != name {
				continue
			}
			who := fmt.Sprintf("%s (%s, token %d)", hd.req, hd.mode, hd.token)
			if hd.mode == wire.ModeReadOnly {
				readers = append(readers, who)
			} else {
				writers = append(writers, who)
			}
		}
		if len(writers) > 1 || len(writers) == 1 && len(readers) > 0 {
			x.fail("held by writers %s and readers %s at once", strings.Join(writers, ", "), strings.Join(readers, ", "))
		}
	}
	// Holders of names that nest meet on the outer name, one in its
	// mode, the other in the intent of its own: they conflict as their
	// modes do (for the modes clients take, Conflicts(a, IntentOf(b))
	// is Conflicts(a, b)).
	for i, a := range x.holds {
		for _, b := range x.holds[i+1:] {
			if a.name != b.name && nests(a.name, b.name) && wire.Conflicts(a.mode, b.mode) {
				x.fail("%s (%s on %s, token %d) and %s (%s on %s, token %d) held, conflicting across nesting",
					a.req, a.mode, a.name, a.token, b.req, b.mode, b.name, b.token)
			}
		}
	}
	// A limited reader holds with fewer than its limit of readers ahead
	// of it on its name (lower tokens; page views carry their share's).
	for _, c := range x.holds {
		if c.mode != wire.ModeReadOnly || c.limit == 0 {
			continue
		}
		ahead := 0
		for _, o := range x.holds {
			if o.req != c.req && o.name == c.name && o.mode == wire.ModeReadOnly && o.token < c.token {
				ahead++
			}
		}
		if ahead >= c.limit {
			x.fail("%s holds with limit %d, token %d, behind %d readers", c.req, c.limit, c.token, ahead)
		}
	}
}

// nestedMeets counts g if it holds beside a holder of a name above or
// below its own: the meetings the intent tickets allow.
func (x *explorer) nestedMeets(g exploreHold) {
	for _, hd := range x.holds {
		if hd.name != g.name && nests(hd.name, g.name) {
			x.meets++
			return
		}
	}
}

// exploreWorld is seed's world: the seeds cycle through plain runs,
// shared read tickets, leader restarts, both, and a web site.
func exploreWorld(seed int64) exploreOptions {
	o := exploreOptions{seed: seed, plain: doorways(seed / 5)}
	switch seed % 5 {
	case 1:
		o.share = 40
	case 2:
		o.restarts = true
	case 3:
		o.share, o.restarts = 40, true
	case 4:
		// A web site: page views on shared read tickets, limited
		// readers, and leaders that restart.
		o.share, o.restarts, o.readers, o.requests = 40, true, true, 6+int(seed%7)
	}
	return o
}

// doorways picks the nodes that run the plain doorway: none, all, or a
// leader and a client's node (a cluster in the middle of an upgrade).
func doorways(k int64) string {
	return [...]string{"", "all", "3,5"}[k%3]
}

// plainWorld is world with every node on the plain doorway: the mutants
// of the doorway's reports need the round between flag and number.
func plainWorld(world func(int64) exploreOptions) func(int64) exploreOptions {
	return func(seed int64) exploreOptions {
		o := world(seed)
		o.plain = "all"
		return o
	}
}

// exploreNestedWorld is seed's world of nested names: plain runs, shared
// read tickets, leader restarts, both, a web site (page views of every
// level, limited readers, and drains), and patient waiters, with shares
// or restarts every other time.
func exploreNestedWorld(seed int64) exploreOptions {
	o := exploreOptions{seed: seed, nested: true}
	switch seed % 6 {
	case 1:
		o.share = 40
	case 2:
		o.restarts = true
	case 3:
		o.share, o.restarts = 40, true
	case 4:
		o.share, o.restarts, o.readers, o.requests = 40, true, true, 6+int(seed%7)
		o.modes = []wire.Mode{wire.ModeReadWritePriority}
	case 5:
		o.patient = true
		if seed/6%2 == 1 {
			o.share = 40
		}
		o.restarts = seed/12%2 == 1
	}
	return o
}

// TestExplore runs the schedule explorer on the real core: no seed may
// break an invariant. Replay one with -explore-seed N (prints its trace).
func TestExplore(t *testing.T) {
	if *exploreNestedSeed != 0 && *exploreSeed == 0 {
		t.Skip("replaying a seed of TestExploreNested")
	}
	exploreSweep(t, exploreWorld, *exploreSeed, int64(*exploreSeeds), "-run 'TestExplore$' -explore-seed")
}

// TestExploreNested runs the explorer on nested names (exploreTree): no
// two holders of names that nest may conflict. Replay a seed with
// -explore-nested-seed N.
func TestExploreNested(t *testing.T) {
	if *exploreSeed != 0 && *exploreNestedSeed == 0 {
		t.Skip("replaying a seed of TestExplore")
	}
	exploreSweep(t, exploreNestedWorld, *exploreNestedSeed, int64(*exploreNestedSeeds),
		"-run TestExploreNested -explore-nested-seed")
}

// exploreSweep runs seeds -explore-from to seeds of world, or replays the one seed
// with its trace (and -explore-mutant, -explore-scenario); replay is how
// a failure's report says to replay it.
func exploreSweep(t *testing.T, world func(int64) exploreOptions, replaySeed, seeds int64, replay string) {
	if replaySeed != 0 {
		o := withTrace(world(replaySeed))
		o.mutant = core.Mutant(*exploreMutant)
		if o.mutant != 0 && !mutation.Built {
			t.Fatalf("-explore-mutant needs the mutants: go test -tags %s", mutation.Tag)
		}
		x := run(t, o)
		t.Logf("seed %d:\n%s", replaySeed, strings.Join(x.trace, "\n"))
		if x.failure != "" && *exploreScenario != "" {
			writeScenario(t, *exploreScenario, x, minimize(t, x))
		}
		if x.failure != "" {
			t.Fatal(x.failure)
		}
		return
	}
	if raceDetector {
		seeds = min(seeds, 100)
	}
	var longest, seedOf int64
	stops, grants, meets := 0, 0, 0
	for seed := max(*exploreFrom, 1); seed <= seeds; seed++ {
		x := run(t, world(seed))
		if x.failure != "" && *exploreKeepGoing {
			t.Errorf("seed %d: %s (replay: go test ./core %s %d)", seed, x.failure, replay, seed)
			continue
		}
		if x.failure != "" {
			t.Fatalf("seed %d: %s (replay: go test ./core %s %d)", seed, x.failure, replay, seed)
		}
		stops += x.stops
		grants, meets = grants+x.grants, meets+x.meets
		if x.settleTicks > longest {
			longest, seedOf = x.settleTicks, seed
		}
	}
	granted := fmt.Sprintf("%d grants", grants)
	if world(1).nested {
		granted += fmt.Sprintf(" (%d beside a holder of a name above or below)", meets)
	}
	t.Logf("seeds %d to %d, %s; the longest settle took %d ticks (seed %d); %d graceful stops of a node's shares",
		max(*exploreFrom, 1), seeds, granted, longest, seedOf, stops)
	if seeds-max(*exploreFrom, 1) >= 999 && stops == 0 {
		t.Fatal("no node stopped sharing: the graceful stop went unexplored")
	}
}

func withTrace(o exploreOptions) exploreOptions { o.trace = true; return o }

// exploreBound is how many seeds a broken core may survive before the
// explorer is declared blind to it.
const exploreBound = 5000

// TestExploreCatchesMutants: each mutant must fail the explorer within
// exploreBound seeds of its world: a safety mutant by an invariant of
// what clients see, a liveness mutant by the settle. Here are the
// mutants the integration simulator's seeds miss (the stale reports, the
// skipped choosing share, the shares restored as readers, the strays,
// and the nested names' two: it has no nested names), and two it catches
// too, as a check on the settle.
func TestExploreCatchesMutants(t *testing.T) {
	if raceDetector {
		t.Skip("the explorer runs on one goroutine: its mutants run in the plain test run, not under -race")
	}
	if !mutation.Need(t) {
		t.Skip("runs under -tags sluicemutants, after the others (core/mutation)")
	}
	site := func(seed int64) exploreOptions { return exploreWorld(5*seed - 1) }
	watched := func(seed int64) exploreOptions {
		return exploreOptions{seed: seed, modes: []wire.Mode{wire.ModeReadOnly, wire.ModeExclusive}, clients: []int{4, 5}}
	}
	soft3 := func(seed int64) exploreOptions {
		return exploreOptions{seed: seed, modes: []wire.Mode{wire.ModeReadOnly, wire.ModeReadWrite}, requests: 3}
	}
	// The nested worlds by their own seeds (replay: -explore-nested-seed
	// with the explorer seed), and the patient ones alone.
	nested := exploreNestedWorld
	patient := func(seed int64) exploreOptions { return exploreNestedWorld(6*seed - 1) }
	for _, m := range []struct {
		name   string
		mutant core.Mutant
		safety bool
		world  func(seed int64) exploreOptions
		// bound, when set, replaces exploreBound.
		bound int64
		// caught is the seed that caught it when last searched from 1: a
		// plain run starts there, -explore-full (CI) from 1. A mutant that
		// seed no longer catches is searched on to the bound, and fails
		// the test if nothing does: -explore-full finds the new seed.
		caught int64
	}{
		// A soft writer deciding on reports made before its mark: a
		// mark race (markRace) lines it up.
		{"stale reports", core.MutantStaleReports, true, plainWorld(exploreWorld), 2 * exploreBound, 6205},
		// A limited reader skipping a share's doorway below it, and a
		// share restored as a plain reader's: the web site's world.
		{"ignore choosing", core.MutantIgnoreChoosing, true, site, 20000, 17158},
		// The same with a policy whose limited reader skips the readers'
		// doorways (ChoosingMatters): a core that waits, on a wrong word.
		{"limit skips readers' doorways", 0, true, func(seed int64) exploreOptions {
			o := site(seed)
			o.choosing = choosingConflictsOnly
			return o
		}, 20000, 17158},
		{"restore shares as readers", core.MutantRestoreSharesAsReaders, true, site, 0, 1631},
		// A graceful stop letting a share go under its readers.
		{"stop with holders", core.MutantStopWithHolders, true, site, 0, 354},
		// An activated soft writer skipping a reader's doorway that
		// began after its first look: a mark race that deals the
		// leaders their three roles in one draw, among readers and soft
		// writers only. Rarer than the others: it needs a lost mark, a
		// late ticket and lost reports at three links in one order. Three
		// requests a run: with a number drawn from the seed it took
		// 64,190 seeds (with four, or without plain doorways, none within
		// 30,000).
		{"soft ignores later doorways", core.MutantSoftIgnoresLaterDoorways, true, plainWorld(soft3), 2 * exploreBound, 5951},
		// A waiter deciding on a report that echoes its ADD_TICKET's
		// watch number without its ticket: a watch race (watchRace)
		// among readers and hard writers on two clients' nodes, so a
		// master often has a request adding while another watches.
		{"unchecked ticket reports", core.MutantUncheckedTicketReports, true, plainWorld(watched), 4 * exploreBound, 4719},
		{"soft keeps place", core.MutantSoftKeepsPlace, false, exploreWorld, 0, 3},
		{"sleep blocked", core.MutantSleepBlocked, false, exploreWorld, 0, 1},
		// A request's late ENTERING makes a replica take it again after
		// its master forgot it: held back until the settle, it comes
		// after the tombstones are gone.
		{"keep strays", core.MutantKeepStrays, false, exploreWorld, 0, 791},
		// A number proposed with ENTERING taken at or below the mark: two
		// holders, one behind the other in line by its request id.
		{"enter ticket unchecked", core.MutantEnterTicketUnchecked, true, exploreWorld, 0, 4},
		// A nested name's request without its parents' tickets: a holder
		// of /s/a beside a drain of /s.
		{"no parent tickets", core.MutantNoParentTickets, true, nested, 0, 2},
		// Parents taken innermost first: a cycle of waits through a drain
		// of the outer name, which no timeout of a patient world breaks
		// before the settle.
		{"parents innermost first", core.MutantParentsInnermostFirst, false, patient, 0, 5},
		// A soft writer that never repeats its unmarked state: a leader
		// restarted from its disk keeps taking its ticket as active once
		// the correction is lost, and readers behind it stall.
		{"stale restored mark", core.MutantStaleRestoredMark, false, nested, 0, 170},
		// A holder's release held back from the next waiter's master:
		// it waits for its watch's refresh, past the settle's bound.
		{"hold back any report", core.MutantHoldBackAny, false, exploreWorld, 0, 1},
		// A limited reader's master treated as a share's: an earlier
		// reader's release is held back from it, and it waits for its
		// watch's refresh.
		{"hold back for readers", core.MutantHoldBackForReaders, false, exploreWorld, 0, 1560},
		// A restored ticket in its doorway, taken at the restarted leader
		// and not yet at the others, dropped on their word that they do
		// not hold it: the master counts that take, and the next
		// request's quorum misses the ticket.
		// With the drop's tombstone (restored_drop_keeps_tomb.txt) the
		// leader refuses the master's later rounds for the request, and
		// the explorer found no two holders in 120,000 nested seeds; the
		// answer alone is caught by restored_doorway_ticket_kept.txt.
		{"holds unknown as gone, dropped without a tombstone", core.MutantHoldsUnknownAsGone | core.MutantHoldsDropUntold, true, nested, 20000, 17417},
		// A stray's release sent once: lost, the stray choosing flag a
		// late ENTERING made after the tombstones went holds the name's
		// waiters past the settle.
		{"stray release once", core.MutantStrayReleaseOnce, false, nested, 30000, 25756},
	} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			bound := cmp.Or(m.bound, exploreBound)
			first := m.caught
			if *exploreFull || first < 1 {
				first = 1
			}
			for seed := first; seed <= bound; seed++ {
				o := m.world(seed)
				o.mutant = m.mutant
				failure, _ := explore(t, o)
				if failure != "" && (!m.safety || slices.Contains(safetyKinds, failureKind(failure))) {
					// The catch is the mutant's: the real core passes
					// the same seed.
					o.mutant, o.choosing = 0, nil
					x := run(t, o)
					if x.failure != "" {
						t.Fatalf("the real core fails seed %d too: %s", seed, x.failure)
					}
					t.Logf("caught at seed %d (explorer seed %d): %s", seed, o.seed, failure)
					return
				}
			}
			t.Fatalf("the explorer did not catch the mutant in %d seeds", bound)
		})
	}
}

// scriptFails replays cmds (scenario commands) on a cluster with the
// mutant and reports the invariant it breaks, or "": with settle, the
// settle's too, once the commands are done.
func scriptFails(t *testing.T, o exploreOptions, cmds []string, settle bool) (*explorer, []string) {
	t.Helper()
	x := newExplorer(t, o)
	var outs []string
	for _, c := range append([]string{clusterCmd(o)}, cmds...) {
		cmd, args, err := datadriven.ParseLine(c)
		if err != nil {
			t.Fatalf("%q: %v", c, err)
		}
		d := &datadriven.TestData{Cmd: cmd, CmdArgs: args}
		var ask exploreAsk
		switch cmd {
		case "acquire":
			mode, _ := semaphore.ParseMode(strArg(d, "mode", ""))
			ask = exploreAsk{name: strArg(d, "name", "a"), mode: mode, limit: int(intArg(t, d, "limit", 0)), at: x.tick}
		case "tick":
			x.tick++
		case "release":
			req := reqArg(t, d)
			x.holds = slices.DeleteFunc(x.holds, func(hd exploreHold) bool { return hd.req == req })
		}
		if cmd == "acquire" {
			// The request's id is known at its first event.
			x.pending, x.pendingAnswered = &ask, false
		}
		out := x.runCmd(t, d, c)
		var id string
		if _, err := fmt.Sscanf(out, "handle %s", &id); cmd == "acquire" && err == nil {
			x.asked[parseReq(t, id)] = ask
			if !x.pendingAnswered {
				x.open[parseReq(t, id)] = true
			}
		}
		outs = append(outs, out)
		x.pending = nil
		if x.nestingLost(); x.failure != "" && strings.Contains(x.failure, "panicked") {
			break
		}
	}
	if settle && x.failure == "" {
		x.settle(t)
	}
	return x, outs
}

// runCmd runs the scenario command d, a node's panic in it being a
// failure as in a run (deliver).
func (x *explorer) runCmd(t *testing.T, d *datadriven.TestData, c string) (out string) {
	if x.o.nested {
		defer func() {
			if p := recover(); p != nil {
				x.nestingLost()
				x.fail("a node panicked on %q: %v", c, p)
				out = fmt.Sprintf("panic: %v\n", p)
			}
		}()
	}
	return x.h.run(t, d)
}

// safetyKinds are the failures of what clients see (failureKind).
var safetyKinds = []string{"not above", "at once", "across nesting", "holds with limit"}

// failureKind is which invariant a failure broke ("" for none).
func failureKind(failure string) string {
	for _, k := range []string{"nobody made", "not above", "at once", "across nesting", "holds with limit", "liveness",
		"nesting lost", "panicked"} {
		if strings.Contains(failure, k) {
			return k
		}
	}
	return failure
}

// clusterCmd is the scenario command that sets up o's cluster.
func clusterCmd(o exploreOptions) string {
	cmd := fmt.Sprintf("cluster nodes=5 leaders=1,2,3 admit=semaphore try=20 share=%d", o.share)
	if o.plain != "" {
		cmd += " plain=" + o.plain
	}
	return cmd
}

// minimize cuts x's script to the commands its failure needs: it drops
// runs of commands, then single ones, as long as the replay still
// breaks the same invariant (a liveness failure: in the settle that
// follows the replay).
func minimize(t *testing.T, x *explorer) []string {
	t.Helper()
	cmds := x.script
	kind := failureKind(x.failure)
	live := kind == "liveness"
	fails := func(cmds []string) string {
		r, _ := scriptFails(t, x.o, cmds, live)
		return failureKind(r.failure)
	}
	if f := fails(cmds); f != kind {
		t.Fatalf("the script does not replay the failure %q: %q", x.failure, f)
	}
	for size := len(cmds) / 2; size >= 1; size /= 2 {
		for i := 0; i+size <= len(cmds); {
			try := slices.Concat(cmds[:i], cmds[i+size:])
			if fails(try) == kind {
				cmds = try
				continue
			}
			i += size
		}
	}
	return cmds
}

// writeScenario writes cmds, with what the mutant's cluster answers, as
// a scenario file: the start of a scripted scenario for the failure. A
// liveness failure's file goes on with the settle, as commands, and ends
// with the requests that still wait and the leader's tables.
func writeScenario(t *testing.T, path string, x *explorer, cmds []string) {
	t.Helper()
	o := x.o
	o.trace = true
	r, _ := scriptFails(t, o, cmds, failureKind(x.failure) == "liveness")
	failure := r.failure
	cmds = slices.Concat(cmds, r.settleScript)
	_, outs := scriptFails(t, o, cmds, false)
	cmds = append([]string{clusterCmd(x.o)}, cmds...)[:len(outs)]
	var b strings.Builder
	fmt.Fprintf(&b, "# Explorer seed %d, mutant %d: %s\n\n", x.o.seed, x.o.mutant, failure)
	for i, c := range cmds {
		fmt.Fprintf(&b, "%s\n----\n%s\n", c, outs[i])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: %d commands", path, len(cmds))
}

// parseReq reads a request id as the scenarios print it.
func parseReq(t *testing.T, s string) wire.RequestID {
	t.Helper()
	var node, inc, n uint64
	if _, err := fmt.Sscanf(s, "%d.%d.%d", &node, &inc, &n); err != nil {
		t.Fatalf("request id %q: %v", s, err)
	}
	return wire.RequestID{Node: wire.NodeID(node), Seq: inc<<32 | n}
}

// settleBound is how many ticks, once the faults stop, the explorer gives
// every request to be granted or fail and a patient writer to be granted
// after them. Far below the deadlines (100 ticks and more) that a stale
// entry holds a name for: a core that leaves one for its deadline to
// clear is caught.
const settleBound = 60

// settle stops the faults: every message is delivered in the order it
// was sent, holders let go at once, and patient writers ask for the name
// (in the nested world, for the grandchild and then the root: every
// level's tickets, and a drain of the whole tree). Within settleBound
// ticks every request must be answered and the writers granted. With
// trace, it records itself as settleScript.
func (x *explorer) settle(t *testing.T) {
	x.tracef("settle")
	start := len(x.script)
	defer func() {
		x.settleScript = slices.Clone(x.script[start:])
		x.script = x.script[:start:start]
	}()
	probes := map[wire.RequestID]bool{}
	x.h.onEvent = func(node int, e core.Event) {
		x.event(node, e)
		if e.Kind == core.EventGranted {
			delete(probes, e.Req)
		}
	}
	defer func() { x.h.onEvent = x.event }()
	releaseAll := func() {
		// A release may grant another (a page view waiting on its node's
		// share): let that one go too.
		for len(x.holds) > 0 {
			hs := x.holds
			x.holds = nil
			for _, hd := range hs {
				if n := x.h.nodes[hd.node-1]; n.core != nil {
					x.tracef("node %d releases %s", hd.node, hd.req)
					x.record("release node=%d req=%s name=%s", hd.node, hd.req, hd.name)
					_ = n.core.Release(hd.req, hd.name)
					x.h.ready(hd.node)
				}
			}
		}
	}
	for i := range 3 {
		if x.h.nodes[i].core == nil {
			x.tracef("leader %d restarts", i+1)
			x.record("restart node=%d", i+1)
			x.h.start(t, i+1)
		}
	}
	releaseAll()
	probeNames := []string{"a"}
	if x.o.nested {
		probeNames = []string{"/s/a/x", "/s"}
	}
	for _, name := range probeNames {
		a := core.Acquire{Name: name, Mode: wire.ModeExclusive, Timeout: 1 << 20, Duration: 1 << 30}
		if x.o.nested {
			a.Parents = parentsOf(name)
		}
		id, err := x.h.nodes[3].core.Acquire(a)
		if err != nil {
			x.fail("settle: %v", err)
			return
		}
		x.record("%s", acquireCmd(4, a))
		x.asked[id] = exploreAsk{name: name, mode: wire.ModeExclusive, at: x.tick}
		x.open[id] = true
		probes[id] = true
		x.h.ready(4)
	}
	bound := int64(settleBound)
	for ticks := int64(0); ; ticks++ {
		mark := len(x.script)
		n := 0
		for ; len(x.h.inflight) > 0 && n < 100000; n++ {
			m := x.h.inflight[0]
			x.h.inflight = x.h.inflight[1:]
			x.record("deliver %s", x.filter(m))
			x.deliver(m)
			if x.failure != "" {
				break // a panicked node has nothing more to say
			}
			releaseAll()
			x.nestingLost()
		}
		x.stabilized(mark, n)
		x.at = x.at[:0]
		if len(x.open) == 0 && len(probes) == 0 {
			x.settleTicks = ticks
			return
		}
		if ticks >= bound || x.failure != "" {
			var open []string
			for id := range x.open {
				open = append(open, id.String())
			}
			slices.Sort(open)
			var also string
			if marks := x.staleMarks(); len(marks) > 0 {
				also = fmt.Sprintf(" (%s)", marks[0])
			}
			x.fail("liveness: %d ticks after the faults stopped, requests %v still wait%s", ticks, open, also)
			for i, n := range x.h.nodes {
				if n.core == nil {
					continue
				}
				if len(n.core.Requests()) > 0 {
					x.record("status node=%d", i+1)
				}
				for _, r := range n.core.Requests() {
					x.tracef("node %d: %s %s %s %s ticket=%d", i+1, r.Handle, r.Name, r.Mode, r.Phase, r.Ticket)
				}
				if i < 3 {
					for _, name := range x.names() {
						entries, hw := n.core.Table(name)
						x.tracef("leader %d: %s high-water %d", i+1, name, hw)
						for _, e := range entries {
							x.tracef("  %s %s %s ticket=%d active=%v", e.Req, e.Mode, e.State, e.Ticket, e.Active)
						}
						if i == 0 {
							x.record("table node=1 name=%s", name)
						}
					}
				}
			}
			return
		}
		x.tick++
		x.tracef("tick %d", x.tick)
		x.record("tick")
		x.tickAll()
		x.nestingLost()
	}
}

// stabilized writes the n deliveries recorded from mark on as one
// stabilize, which delivers in the same order, when no release came
// between them.
func (x *explorer) stabilized(mark, n int) {
	if !x.o.trace || n == 0 || n > 10000 || len(x.script)-mark != n {
		return
	}
	x.script = append(x.script[:mark], "stabilize")
}

// tickAll ticks every node that is up. A node must have armed the timer
// of every request that was due (Stats.MissedTimers), and woken every
// waiter a report concerned (Stats.MissedDecisions, with
// Config.CheckIncremental): the scenarios' checks, on every schedule.
func (x *explorer) tickAll() {
	for i, n := range x.h.nodes {
		if n.core == nil {
			continue
		}
		n.core.Tick()
		x.h.ready(i + 1)
		if st := n.core.Stats(); st.MissedTimers > 0 || st.MissedDecisions > 0 {
			x.fail("node %d: %d requests' timers were due but not armed, %d waiters slept through a report",
				i+1, st.MissedTimers, st.MissedDecisions)
		}
	}
}

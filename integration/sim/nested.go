package sim

import (
	"fmt"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
)

// Nested names (Options.Nested). Each site is a small tree of URLs:
//
//	https://siteN.example/
//	├── /shop
//	│   └── /shop/cart
//	│       └── /shop/cart?item=7
//	└── /blog
//
// and every acquire names the levels above its name as its parents, so a
// holder meets the holders of its parents and descendants on the names
// they share. Four levels make three parents, taken one after the other;
// two branches let writers of one go beside holders of the other.

// nestedNames is the tree of names of the site whose root is root, root
// first, each name's parents before it.
func nestedNames(root string) []string {
	return []string{root, root + "shop", root + "shop/cart", root + "shop/cart?item=7", root + "blog"}
}

// namePaths are the levels of each name (semaphore.NamePath). The
// simulator's names are canonical: each is its own last level.
func namePaths(names []string) map[string][]string {
	paths := map[string][]string{}
	for _, name := range names {
		path, err := semaphore.NamePath(name)
		if err != nil || path[len(path)-1] != name {
			panic(fmt.Sprintf("name %q: levels %q, %v", name, path, err))
		}
		paths[name] = path
	}
	return paths
}

// parents are the levels above name, outermost first: what an acquire of
// it names (nil for a flat name).
func (s *Sim) parents(name string) []string {
	path := s.paths[name]
	if len(path) < 2 {
		return nil
	}
	return path[:len(path)-1]
}

// nests: a and b are the same name, or one is a level of the other.
func (s *Sim) nests(a, b string) bool {
	return a == b || slices.Contains(s.paths[a], b) || slices.Contains(s.paths[b], a)
}

// checkNested: two clients that hold names that nest (the same one, or
// one above the other) hold in modes that do not conflict (wire.Conflicts):
// nobody else holds a writer's name, a name below it or a name above it;
// readers share. Holds are the clients' own, by their timers, as the per-name
// check counts them; an operator's force-unlock declared forced ones gone,
// and parentless ones hold no parents (GapDoorwayDropsParents, left out).
func (s *Sim) checkNested() {
	conflicts := s.o.conflicts
	if conflicts == nil {
		conflicts = wire.Conflicts
	}
	var holders []*client
	for _, c := range s.clients {
		if s.holds(c) && !c.forced && !c.parentless {
			holders = append(holders, c)
		}
	}
	for i, a := range holders {
		for _, b := range holders[i+1:] {
			if s.nests(a.name, b.name) && conflicts(a.mode, b.mode) {
				s.conflicting = [2]*client{a, b}
				s.failf("nested names held at once in conflicting modes: client %d holds %s (%s, token %d, expiry %d), client %d holds %s (%s, token %d, expiry %d)",
					a.id, a.name, a.mode, a.token, a.expiry, b.id, b.name, b.mode, b.token, b.expiry)
				return
			}
		}
	}
}

// countNested counts c's grant as NestedGrants when a client holds a name
// above or below it, as SideBySide when c and another holder of its site,
// on a name that does not nest with c's, are writers.
func (s *Sim) countNested(c *client) {
	nested, side := false, false
	for _, o := range s.clients {
		if o == c || o.forced || o.parentless || !s.holds(o) || o.name == c.name {
			continue
		}
		switch {
		case s.nests(o.name, c.name):
			nested = true
		case c.mode.Writer() && o.mode.Writer() && s.idleKey(o.name) == s.idleKey(c.name):
			side = true
		}
	}
	if nested {
		s.res.NestedGrants++
	}
	if side {
		s.res.SideBySide++
	}
}

// noteIntents: c's intent tickets on its parents are in the tables now
// (it was just granted, or stops holding). A gentle writer's quiet period
// counts from the last reader ticket, and intents are reader tickets.
func (s *Sim) noteIntents(c *client) {
	for _, p := range s.parents(c.name) {
		s.lastReaderEvent[p] = s.tick
	}
}

// endForcedBelow ends the holds that an operator's force-unlock of e, an
// intent ticket on name, may take, and marks the waiters whose grant it
// may race. The core tells no client which tickets its request holds on
// its parents: every request of e's node below name whose mode takes e's
// intent counts as forced, a few more than the one e was for (or a whole
// node's, when e is its intent-shared share).
func (s *Sim) endForcedBelow(name string, e wire.Entry) {
	if !e.Mode.Intent() {
		return
	}
	mark := s.forces[e.Req].calledAt
	for _, c := range s.clients {
		switch {
		case c.state == idle || c.name == name || !slices.Contains(s.paths[c.name], name) || c.mode.IntentOf() != e.Mode:
		case c.node != int(e.Req.Node)-1 && !c.orphan:
		case c.state == waiting:
			c.parentForced = mark
		case !c.forced:
			c.forced = true
			if c.token != 0 {
				s.res.ForcedHolders++
				s.closeHold(c)
			}
		}
	}
}

// grantRacedParentForce marks c forced when an operator's force-unlock of
// an intent ticket above its name was called while it waited: the grant
// may rest on a ticket the leaders dropped, beside the next holder of
// that name. Its own name's token still counts for fencing.
func (s *Sim) grantRacedParentForce(c *client) {
	if c.parentForced != 0 && !c.forced {
		c.forced, c.forcedSince = true, c.parentForced
		s.res.ForcedHolders++
	}
}

// idleKey is what the idle measure counts name's waits and holds under:
// the name, or with Nested the root of its site, since a wait anywhere in
// a site may be on a holder anywhere in it (through a drain of the root).
func (s *Sim) idleKey(name string) string {
	if !s.o.Nested {
		return name
	}
	if path := s.paths[name]; len(path) > 0 {
		return path[0]
	}
	return ""
}

// idleKeys are the names, or with Nested the sites' roots.
func (s *Sim) idleKeys() []string {
	if !s.o.Nested {
		return s.names
	}
	var roots []string
	for _, name := range s.names {
		if len(s.paths[name]) == 1 {
			roots = append(roots, name)
		}
	}
	return roots
}

// probeNested probes every name of every site, from the settle's 200th
// tick on, with an exclusive lock, which waits for every ticket of its
// name, intents too: one name of a site at a time, so that each probe
// waits only for what the faults left, not for the probes of names above
// or below it, and a granted probe lets go at once. Each must be granted
// within its timeout (settle); the settle goes on until the last one is
// (probing).
func (s *Sim) probeNested(since int64) {
	if since == 200 {
		s.unprobed = slices.Clone(s.names)
	}
	if since < 200 {
		return
	}
	for _, name := range slices.Clone(s.unprobed) {
		site := s.idleKey(name)
		if slices.ContainsFunc(s.clients, func(c *client) bool { return c.probe && c.state == waiting && s.idleKey(c.name) == site }) {
			continue
		}
		c := s.pickProbe()
		if c == nil {
			// Every client waits for a probe: the next one frees a client.
			if !slices.ContainsFunc(s.clients, func(c *client) bool { return c.probe && c.state == waiting }) {
				s.failf("no client left to probe %s", name)
			}
			return
		}
		s.acquire(c, name, true)
		s.unprobed = slices.DeleteFunc(s.unprobed, func(n string) bool { return n == name })
		if s.fail != nil {
			return
		}
	}
}

// probing: the settle, which ended at tick end, goes on while nested
// probes are yet to be made or granted. A site's probes go one after the
// other, and the first may wait long for what the faults left (tickets of
// an agent's earlier life, on parents too, that a restarted leader keeps
// for their whole lifetime), so the settle's own length does not bound
// them all; each probe's timeout does, and past the last of them final
// fails a probe still waiting.
func (s *Sim) probing(end int64) bool {
	if !s.o.Nested || s.tick > end+int64(len(s.names))*(s.o.SettleTicks/2) {
		return false
	}
	return len(s.unprobed) > 0 || slices.ContainsFunc(s.clients, func(c *client) bool { return c.probe && c.state == waiting })
}

// NestedGap is a known gap of the core's nested names. Modelled, it makes
// a nested run fail; left out (Options.NestedLeaveOut), the simulator
// tolerates it where it shows, and counts it. Once the core closes a gap,
// TestSimNestedKnownGaps says so, and the gap leaves KnownNestedGaps.
type NestedGap uint8

const (
	// GapDoorwayDropsParents: restartDoorway (core/master.go) starts a
	// nested request's fresh doorway without its parents, and releases
	// them with the old one; the request then goes on, and is granted,
	// holding no intent on any name above its own. A doorway restarts
	// when a soft writer takes a new place in line behind a hard writer
	// (Decision.Requeue: no fault needed), when a replica's restart loses
	// its choosing flag, and at a view change. Modelled, the nested runs
	// fail: without faults, a writer of /shop/cart granted beside a
	// reader of the root, or a gentle writer of the root granted while a
	// writer of /shop that took a new place in line held (TestSimNested-
	// NoFaults's world, seeds 16, 40, 44); with faults, an exclusive lock
	// of /blog beside a reader of the root (TestSimNested's, seed 115).
	// And when a leader restarts, masterRestarted walks its requests by
	// id and may restart a nested request's doorway; releasing a parent
	// held on the node's shared ticket forgets it, and the walk then
	// meets the parent's id with no request: a nil pointer panic, the
	// agent dies (TestSimNested's world, seeds 43, 133). (A parent's own
	// doorway that restarts leaves its request waiting for it until its
	// timeout: slow, and safe.) Left out: a client granted through a
	// restarted doorway of its nested request (its id on the wire is no
	// longer its handle) is left out of the nested check, and its intents
	// of the gentle writers' quiet periods (Result.Parentless; the
	// per-name checks keep it); an agent that panics in masterRestarted
	// dies, and its supervisor starts it again (Result.AgentPanics).
	GapDoorwayDropsParents NestedGap = 1 << iota
	// GapParentTimers: when a held parent's renewal completes while its
	// request still waits for a later name, onRenewAck (core/master.go)
	// arms the parent's timer before it clears the renewal: the timer is
	// armed as if the renewal were still under way, and once it is
	// cleared the parent's next renewal by its node (half its lease
	// before the end, parentRenewAt) is due before the timer, which fires
	// up to a retransmission late. The check of the timer heap
	// (Config.CheckIncremental) counts it missed (TestSimNested's world,
	// seed 1). Left out: missed timers in a nested run are counted
	// (Result.MissedTimers), not failed on.
	GapParentTimers

	// KnownNestedGaps are all the known gaps of nested names.
	KnownNestedGaps = GapDoorwayDropsParents | GapParentTimers
)

// nestedGapFlag names a gap for -nested-gaps.
type nestedGapFlag struct {
	g    NestedGap
	name string
}

var nestedGapFlags = []nestedGapFlag{{GapDoorwayDropsParents, "doorway"}, {GapParentTimers, "timers"}}

// String names the gaps in g as -nested-gaps does.
func (g NestedGap) String() string {
	var names []string
	for _, f := range nestedGapFlags {
		if g&f.g != 0 {
			names = append(names, f.name)
		}
	}
	return strings.Join(names, ",")
}

// grantedParentless marks c, just granted at node, parentless when its
// nested request was granted through a restarted doorway (its id on the
// wire is no longer its handle): it holds no parent tickets.
func (s *Sim) grantedParentless(node int, c *client) {
	if len(s.parents(c.name)) == 0 || s.wireID(node, c.handle) == c.handle {
		return
	}
	s.res.Parentless++
	if s.o.NestedLeaveOut&GapDoorwayDropsParents != 0 {
		c.parentless = true
		s.tracef("client %d holds %s through a restarted doorway, without its parents", c.id, c.name)
	}
}

// missedTimers checks node i's missed timers after a tick: false when they
// fail the run; with GapParentTimers left out of a nested run, they are
// counted instead.
func (s *Sim) missedTimers(i int) bool {
	n := s.nodes[i]
	missed := n.core.Stats().MissedTimers
	if missed == n.missed {
		return true
	}
	if !s.o.Nested || s.o.NestedLeaveOut&GapParentTimers == 0 {
		s.failf("node %d: %d requests' timers were due at tick %d but not armed", n.id, missed, s.tick)
		return false
	}
	s.res.MissedTimers += int(missed - n.missed)
	n.missed = missed
	return true
}

// stepCore steps m at node i's lock core, and says whether the node died
// of it. A panic fails the run, unless it is GapDoorwayDropsParents's
// (in masterRestarted), left out: the agent then dies of it, as its
// process would, and its supervisor starts it again at once.
func (s *Sim) stepCore(i int, m wire.Message) (err error, died bool) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		died = true
		stack := string(debug.Stack())
		if !s.o.Nested || s.o.NestedLeaveOut&GapDoorwayDropsParents == 0 || !strings.Contains(stack, "core.(*Node).masterRestarted") {
			s.failf("node %d panicked stepping %v: %v\n%s", i+1, m, p, stack)
			return
		}
		s.res.AgentPanics++
		s.tracef("node %d's agent dies of a panic in masterRestarted (%v) and starts again", i+1, p)
		s.crash(i)
		s.start(i)
	}()
	return s.nodes[i].core.Step(m), false
}

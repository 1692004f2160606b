package sim

import (
	"fmt"
	"slices"

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
// check counts them; an operator's force-unlock declared forced ones gone.
func (s *Sim) checkNested() {
	conflicts := s.o.conflicts
	if conflicts == nil {
		conflicts = wire.Conflicts
	}
	var holders []*client
	for _, c := range s.clients {
		if s.holds(c) && !c.forced {
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
		if o == c || o.forced || !s.holds(o) || o.name == c.name {
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
//
// Without nested names, it goes on while reader probes (probeReaders) are
// yet to be made or answered, for as long as one probe's timeout more.
func (s *Sim) probing(end int64) bool {
	waiting := slices.ContainsFunc(s.clients, func(c *client) bool { return c.probe && c.state == waiting })
	if !s.o.Nested {
		return s.tick <= end+s.o.SettleTicks/2 && (len(s.readerUnprobed) > 0 || waiting)
	}
	if s.tick > end+int64(len(s.names))*(s.o.SettleTicks/2) {
		return false
	}
	return len(s.unprobed) > 0 || waiting
}

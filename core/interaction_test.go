package core_test

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
)

// TestInteraction runs the scripted scenarios in testdata/. Each file is one
// dangerous interleaving, played step by step on a hand-driven network.
// Rewrite expectations with: go test ./core -run TestInteraction -rewrite
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type hnode struct {
	core *core.Node // nil while down
	inc  uint32
	disk *core.Durable
	// stalled: the node's store writer has not committed since stall-disk,
	// so its lazy writes (core.Write.Lazy) wait in lazy, and a crash
	// loses them; a strict write commits them first, in order.
	stalled bool
	lazy    []core.Write
}

// harness is a cluster whose messages wait in one ordered in-flight list
// until a command delivers, drops or duplicates them.
type harness struct {
	mutant   core.Mutant          // set by tests that replay a scenario on a broken core
	policy   core.Admit           // replaces the semaphore's policy (admit=semaphore), to replay on a broken one
	choosing core.ChoosingMatters // replaces the semaphore's ChoosingMatters likewise
	nodes    []*hnode
	view     wire.View
	cfg      core.Config
	inflight []wire.Message
	// held are messages set aside by hold, to arrive late (deliver-held).
	held     []wire.Message
	isolated map[wire.NodeID]bool
	// cut are links that lose every message, both ways.
	cut map[[2]wire.NodeID]bool
	out strings.Builder
	// onEvent, when set, sees every client event as it is applied (the
	// schedule explorer checks its invariants there).
	onEvent func(node int, e core.Event)
	// quiet: nothing reads the output (an explorer's run without a
	// trace), so none is made.
	quiet bool
	// plain: the nodes that run the plain doorway (cluster plain=...).
	plain map[int]bool
	// eager: the nodes that send a report at every change (cluster
	// eager=...: core.Config.EagerReports).
	eager map[int]bool
}

func (h *harness) lost(m wire.Message) bool {
	return m.From != m.To && (h.isolated[m.From] || h.isolated[m.To] || h.cut[[2]wire.NodeID{m.From, m.To}])
}

func (h *harness) printf(format string, args ...any) {
	if !h.quiet {
		fmt.Fprintf(&h.out, format, args...)
	}
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.out.Reset()
	switch d.Cmd {
	case "cluster":
		h.cluster(t, d)
	case "acquire":
		n := h.nodeArg(t, d)
		mode := wire.ModeExclusive
		if m := strArg(d, "mode", ""); m != "" {
			var err error
			if mode, err = semaphore.ParseMode(m); err != nil {
				d.Fatalf(t, "%v", err)
			}
		}
		a := core.Acquire{Name: strArg(d, "name", "a"), Mode: mode,
			Timeout: intArg(t, d, "timeout", 100), Duration: intArg(t, d, "duration", 50), Grace: intArg(t, d, "grace", 10),
			Quiet: intArg(t, d, "quiet", 0), Limit: int(intArg(t, d, "limit", 0))}
		if p := strArg(d, "parents", ""); p != "" {
			a.Parents = strings.Split(p, ",")
		}
		id, err := h.nodes[n-1].core.Acquire(a)
		if err != nil {
			h.printf("error: %v\n", err)
			break
		}
		h.printf("handle %s\n", id)
		h.ready(n)
	case "release", "renew":
		n := h.nodeArg(t, d)
		id := reqArg(t, d)
		var err error
		if d.Cmd == "release" {
			err = h.nodes[n-1].core.Release(id, strArg(d, "name", ""))
		} else {
			err = h.nodes[n-1].core.Renew(id)
		}
		if err != nil {
			h.printf("error: %v\n", err)
		}
		h.ready(n)
	case "force-release":
		n := h.nodeArg(t, d)
		if err := h.nodes[n-1].core.ForceRelease(strArg(d, "name", "a"), reqArg(t, d)); err != nil {
			h.printf("error: %v\n", err)
		}
		h.ready(n)
	case "stop-sharing":
		// A graceful stop begins: the node lets its shares go.
		n := h.nodeArg(t, d)
		h.nodes[n-1].core.StopSharing()
		h.ready(n)
	case "shares":
		h.printf("shares out %d\n", h.nodes[h.nodeArg(t, d)-1].core.SharesOut())
	case "announce":
		// announce from=L to=N: L's restart announcement once more, to N
		// (one that was lost, arriving late).
		from := intArg(t, d, "from", 0)
		h.inflight = append(h.inflight, wire.Message{Kind: wire.KindRestarted, From: wire.NodeID(from),
			To: wire.NodeID(intArg(t, d, "to", 0)), Incarnation: h.nodes[from-1].inc})
	case "deliver", "drop", "dup", "hold":
		h.matching(t, d)
	case "deliver-held":
		// The messages set aside by hold, late, in the order they were sent.
		held := h.held
		h.held = nil
		for _, m := range held {
			h.deliver(m)
		}
	case "stabilize":
		h.stabilize()
	case "tick":
		count := intArg(t, d, "n", 1)
		for range count {
			for i, n := range h.nodes {
				if n.core != nil && (!d.HasArg("node") || h.nodeArg(t, d) == i+1) {
					n.core.Tick()
					if missed := n.core.Stats().MissedTimers; missed > 0 {
						d.Fatalf(t, "node %d: %d requests' timers were due but not armed", i+1, missed)
					}
					h.ready(i + 1)
				}
			}
		}
	case "crash":
		n := h.nodeArg(t, d)
		hn := h.nodes[n-1]
		hn.core = nil
		h.printf("node %d crashed", n)
		if len(hn.lazy) > 0 {
			h.printf(", losing %d lazy writes", len(hn.lazy))
		}
		hn.lazy, hn.stalled = nil, false
		h.printf("\n")
	case "stall-disk":
		// The node's lazy writes wait for a commit that a crash forestalls.
		h.nodes[h.nodeArg(t, d)-1].stalled = true
	case "cut":
		// cut a=N b=M,...: the links between N and each M lose everything.
		a := wire.NodeID(intArg(t, d, "a", 0))
		for _, b := range idsArg(t, d, "b") {
			h.cut[[2]wire.NodeID{a, b}], h.cut[[2]wire.NodeID{b, a}] = true, true
		}
	case "restart":
		h.start(t, h.nodeArg(t, d))
	case "isolate":
		h.isolated[wire.NodeID(h.nodeArg(t, d))] = true
	case "heal":
		clear(h.isolated)
		clear(h.cut)
	case "view":
		v := wire.View{Epoch: uint64(intArg(t, d, "epoch", 0)), Leaders: idsArg(t, d, "leaders"),
			PrevEpoch: uint64(intArg(t, d, "prev-epoch", 0)), PrevLeaders: idsArg(t, d, "prev-leaders")}
		only := idsArg(t, d, "nodes") // default: every node that is up
		for i, n := range h.nodes {
			if n.core != nil && (len(only) == 0 || slices.Contains(only, wire.NodeID(i+1))) {
				n.core.SetView(v)
				h.ready(i + 1)
			}
		}
		if len(only) == 0 {
			h.cfg.View = v // nodes restarted later start from this view
		}
	case "serving":
		for i, n := range h.nodes {
			if n.core != nil && n.core.View().IsLeader(wire.NodeID(i+1)) {
				h.printf("node %d serving=%v\n", i+1, n.core.Serving())
			}
		}
	case "inflight":
		for _, m := range h.inflight {
			h.printf("%s\n", fmtMsg(m))
		}
	case "status":
		n := h.nodeArg(t, d)
		for _, r := range h.nodes[n-1].core.Requests() {
			asked := ""
			if r.Asked != wire.YieldNone {
				asked = " asked=" + map[wire.Yield]string{wire.YieldIdle: "idle", wire.YieldDrain: "drain"}[r.Asked]
			}
			h.printf("%s %s %s %s ticket=%d%s\n", r.Handle, r.Name, r.Mode, r.Phase, r.Ticket, asked)
		}
	case "table":
		n := h.nodeArg(t, d)
		entries, hw := h.nodes[n-1].core.Table(strArg(d, "name", "a"))
		h.printf("high-water %d\n", hw)
		for _, e := range entries {
			h.printf("%s %s ticket=%d\n", e.Req, e.State, e.Ticket)
		}
	case "names":
		// The names a replica keeps anything of (idle ones are forgotten).
		h.printf("names %q\n", h.nodes[h.nodeArg(t, d)-1].core.Names())
	case "disk":
		// What the node stored for the name: tickets and tombstones.
		d0 := h.nodes[h.nodeArg(t, d)-1].disk
		name := strArg(d, "name", "a")
		h.printf("high-water %d\n", d0.HighWater[name])
		if d0.Floor > 0 {
			h.printf("floor %d\n", d0.Floor)
		}
		for _, req := range slices.SortedFunc(maps.Keys(d0.Tickets[name]), wire.RequestID.Compare) {
			dt := d0.Tickets[name][req]
			h.printf("%s %s ticket=%d lifetime=%d\n", req, dt.Entry.State, dt.Entry.Ticket, dt.Lifetime)
		}
	case "stats":
		st := h.nodes[h.nodeArg(t, d)-1].core.Stats()
		h.printf("stale-replies=%d stale-incarnation=%d retransmits=%d doorway-restarts=%d ticket-raises=%d expired=%d\n",
			st.StaleReplies, st.StaleIncarnation, st.Retransmits, st.DoorwayRestarts, st.TicketRaises, st.Expired)
		if st.StrayReleases > 0 {
			h.printf("stray-releases=%d\n", st.StrayReleases)
		}
		if st.HeldBackReports > 0 {
			h.printf("held-back-reports=%d\n", st.HeldBackReports)
		}
		if st.ShareBypasses > 0 {
			h.printf("share-bypasses=%d\n", st.ShareBypasses)
		}
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	if h.out.Len() == 0 {
		return "ok\n"
	}
	return h.out.String()
}

func (h *harness) cluster(t *testing.T, d *datadriven.TestData) {
	size := int(intArg(t, d, "nodes", 5))
	h.view = wire.View{Epoch: 1}
	for _, s := range strings.Split(strArg(d, "leaders", "1,2,3"), ",") {
		id, err := strconv.Atoi(s)
		if err != nil {
			d.Fatalf(t, "leaders: %v", err)
		}
		h.view.Leaders = append(h.view.Leaders, wire.NodeID(id))
	}
	var peers []wire.NodeID
	for i := range size {
		peers = append(peers, wire.NodeID(i+1))
	}
	h.cfg = core.Config{View: h.view, Peers: peers, TryTicks: intArg(t, d, "try", 20), DoorwayTicks: intArg(t, d, "doorway", 0), Mutant: h.mutant,
		CheckIncremental: true, ShareLease: intArg(t, d, "share", 0)}
	if strArg(d, "admit", "") == "semaphore" {
		h.cfg.Admit, h.cfg.RefuseEarly, h.cfg.ChoosingMatters = semaphore.Admit, semaphore.RefuseEarly, semaphore.ChoosingMatters
		if h.policy != nil {
			h.cfg.Admit = h.policy
		}
		if h.choosing != nil {
			h.cfg.ChoosingMatters = h.choosing
		}
	}
	h.plain = nodeSet(strArg(d, "plain", ""), size)
	h.eager = nodeSet(strArg(d, "eager", ""), size)
	h.nodes, h.inflight, h.isolated, h.cut = nil, nil, map[wire.NodeID]bool{}, map[[2]wire.NodeID]bool{}
	for i := range size {
		h.nodes = append(h.nodes, &hnode{disk: core.NewDurable()})
		h.start(t, i+1)
	}
	// The first start's announcements say nothing a scenario needs.
	h.out.Reset()
	h.inflight = nil
	h.printf("%d nodes, leaders %v\n", size, h.view.Leaders)
}

// nodeSet reads a cluster's plain= or eager=, "all" or a list of nodes:
// those that run the doorway of releases before 0.9
// (core.Config.PlainDoorway), or send every report as those did
// (core.Config.EagerReports).
func nodeSet(p string, size int) map[int]bool {
	plain := map[int]bool{}
	for i := range size {
		plain[i+1] = p == "all"
	}
	for _, s := range strings.Split(p, ",") {
		if id, err := strconv.Atoi(s); err == nil {
			plain[id] = true
		}
	}
	return plain
}

func (h *harness) start(t *testing.T, id int) {
	n := h.nodes[id-1]
	n.inc++
	cfg := h.cfg
	cfg.ID, cfg.Incarnation = wire.NodeID(id), n.inc
	cfg.PlainDoorway = h.plain[id]
	cfg.EagerReports = h.eager[id]
	c, err := core.New(cfg, n.disk.Clone())
	if err != nil {
		t.Fatal(err)
	}
	n.core = c
	h.printf("node %d starts, incarnation %d\n", id, n.inc)
	h.ready(id)
}

// ready applies a node's Ready in the contract's order.
func (h *harness) ready(id int) {
	n := h.nodes[id-1]
	for n.core != nil && n.core.HasReady() {
		rd := n.core.Ready()
		if missed := n.core.Stats().MissedDecisions; missed > 0 {
			// In the output, so a scenario's expectation fails on it.
			h.printf("node %d: %d waiters slept through a report they had to decide on\n", id, missed)
		}
		switch {
		case n.stalled && !slices.ContainsFunc(rd.Persist, func(w core.Write) bool { return !w.Lazy }):
			n.lazy = append(n.lazy, rd.Persist...)
		default:
			n.disk.Apply(n.lazy)
			n.disk.Apply(rd.Persist)
			n.lazy = nil
		}
		h.inflight = append(h.inflight, rd.Messages...)
		for _, e := range rd.Events {
			if h.onEvent != nil {
				h.onEvent(id, e)
			}
			h.printf("node %d: %s %s %s", id, e.Kind, e.Req, e.Name)
			if e.Code != wire.CodeNone {
				h.printf(" error=%s", e.Code)
			}
			switch {
			case e.Forced && e.Held:
				h.printf(" forced=holder")
			case e.Forced:
				h.printf(" forced=waiter")
			}
			if e.Kind == core.EventGranted || e.Kind == core.EventRenewed {
				h.printf(" token=%d elapsed=%d ttl=%d", e.Token, e.Elapsed, e.TTL)
			}
			if e.Shared {
				h.printf(" shared")
			}
			h.printf("\n")
		}
		n.core.Advance()
	}
}

// matching delivers, drops or duplicates the in-flight messages that match
// every filter given: from, to, kind, name, req, t (ticket), watch, seq
// and since (a report's sequence and base), inc, high-water, reject (0 or
// 1), sum (msgSum: the one message, where the others do not tell it from
// one like it); count limits how many.
func (h *harness) matching(t *testing.T, d *datadriven.TestData) {
	limit := int(intArg(t, d, "count", -1))
	var keep, picked []wire.Message
	for _, m := range h.inflight {
		if limit != 0 && h.matches(t, d, m) {
			picked = append(picked, m)
			limit--
		} else {
			keep = append(keep, m)
		}
	}
	h.inflight = keep
	switch d.Cmd {
	case "drop":
		for _, m := range picked {
			h.printf("dropped %s\n", fmtMsg(m))
		}
	case "dup":
		h.inflight = append(h.inflight, picked...)
		h.inflight = append(h.inflight, picked...)
		h.printf("duplicated %d\n", len(picked))
	case "hold":
		// Late: out of the network (stabilize does not see them) until
		// deliver-held.
		h.held = append(h.held, picked...)
		for _, m := range picked {
			h.printf("held %s\n", fmtMsg(m))
		}
	default:
		if !d.HasArg("batch") {
			for _, m := range picked {
				h.deliver(m)
			}
			return
		}
		// batch: each node steps all of its messages, then takes one
		// Ready, as a runtime does with what one read brought.
		var touched []int
		for _, m := range picked {
			if h.step(m) && !slices.Contains(touched, int(m.To)) {
				touched = append(touched, int(m.To))
			}
		}
		for _, to := range touched {
			h.ready(to)
		}
	}
}

func (h *harness) matches(t *testing.T, d *datadriven.TestData, m wire.Message) bool {
	if d.HasArg("from") && wire.NodeID(intArg(t, d, "from", 0)) != m.From ||
		d.HasArg("to") && wire.NodeID(intArg(t, d, "to", 0)) != m.To ||
		d.HasArg("kind") && strArg(d, "kind", "") != m.Kind.String() ||
		d.HasArg("name") && strArg(d, "name", "") != m.Name ||
		d.HasArg("t") && uint64(intArg(t, d, "t", 0)) != m.Ticket ||
		d.HasArg("watch") && uint64(intArg(t, d, "watch", 0)) != m.WatchSeq ||
		d.HasArg("seq") && uint64(intArg(t, d, "seq", 0)) != m.ReportSeq ||
		d.HasArg("since") && uint64(intArg(t, d, "since", 0)) != m.BaseSeq ||
		d.HasArg("sum") && strArg(d, "sum", "") != msgSum(m) ||
		d.HasArg("inc") && uint32(intArg(t, d, "inc", 0)) != m.Incarnation ||
		d.HasArg("high-water") && uint64(intArg(t, d, "high-water", 0)) != m.HighWater ||
		d.HasArg("reject") && (intArg(t, d, "reject", 0) != 0) != m.Reject {
		return false
	}
	return !d.HasArg("req") || reqArg(t, d) == m.Req
}

func (h *harness) deliver(m wire.Message) {
	if h.step(m) {
		h.ready(int(m.To))
	}
}

// step hands m to its node, without the Ready; false when m was lost.
func (h *harness) step(m wire.Message) bool {
	if int(m.To) < 1 || int(m.To) > len(h.nodes) {
		h.printf("lost (no node %d) %s\n", m.To, fmtMsg(m))
		return false
	}
	to := h.nodes[m.To-1]
	switch {
	case to.core == nil:
		h.printf("lost (node %d down) %s\n", m.To, fmtMsg(m))
		return false
	case h.lost(m):
		h.printf("lost (isolated) %s\n", fmtMsg(m))
		return false
	}
	if !h.quiet {
		h.printf("%s\n", fmtMsg(m))
	}
	if err := to.core.Step(m); err != nil {
		h.printf("  rejected: %v\n", err)
	}
	return true
}

// stabilize delivers everything until nothing is in flight, printing only
// events and losses.
func (h *harness) stabilize() {
	delivered := 0
	for len(h.inflight) > 0 && delivered < 10000 {
		m := h.inflight[0]
		h.inflight = h.inflight[1:]
		if int(m.To) < 1 || int(m.To) > len(h.nodes) {
			continue // to a node that is not in the cluster (an operator's typo)
		}
		to := h.nodes[m.To-1]
		if to.core == nil || h.lost(m) {
			continue
		}
		delivered++
		_ = to.core.Step(m)
		h.ready(int(m.To))
	}
	h.printf("%d messages delivered\n", delivered)
}

func (h *harness) nodeArg(t *testing.T, d *datadriven.TestData) int {
	n := int(intArg(t, d, "node", 0))
	if n < 1 || n > len(h.nodes) {
		d.Fatalf(t, "node=%d out of range", n)
	}
	return n
}

// msgSum is a short digest of every field of m.
func msgSum(m wire.Message) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%+v", m)
	return fmt.Sprintf("%08x", h.Sum32())
}

func fmtMsg(m wire.Message) string {
	s := fmt.Sprintf("%d->%d %s", m.From, m.To, m.Kind)
	if m.Name != "" {
		s += " " + m.Name
	}
	if m.Req != (wire.RequestID{}) {
		s += " " + m.Req.String()
	}
	if m.Ticket != 0 {
		s += fmt.Sprintf(" t=%d", m.Ticket)
	}
	if m.WatchSeq != 0 {
		s += fmt.Sprintf(" watch=%d", m.WatchSeq)
	}
	if m.Incarnation != 0 && m.Kind != wire.KindReport {
		s += fmt.Sprintf(" inc=%d", m.Incarnation)
	}
	if m.Reject {
		s += " reject"
	}
	if m.Held {
		s += " held"
	}
	if m.HighWater != 0 {
		s += fmt.Sprintf(" high-water=%d", m.HighWater)
	}
	if m.Kind == wire.KindReport {
		parts := []string{}
		for _, e := range m.Entries {
			parts = append(parts, fmt.Sprintf("%s:%s:%d", e.Req, e.State, e.Ticket))
		}
		s += " [" + strings.Join(parts, " ") + "]"
		if m.BaseSeq != 0 {
			s += " (changes since " + strconv.FormatUint(m.BaseSeq, 10) + ")"
		}
	}
	return s
}

func strArg(d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return strings.Join(a.Vals, ",")
	}
	return def
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int64) int64 {
	s := strArg(d, key, "")
	if s == "" {
		return def
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return v
}

func idsArg(t *testing.T, d *datadriven.TestData, key string) []wire.NodeID {
	var out []wire.NodeID
	if a, ok := d.Arg(key); ok {
		for _, v := range a.Vals {
			x, err := strconv.Atoi(v)
			if err != nil {
				d.Fatalf(t, "%s: %v", key, err)
			}
			out = append(out, wire.NodeID(x))
		}
	}
	return out
}

// reqArg parses req=NODE.INCARNATION.COUNTER, as RequestID.String prints it.
func reqArg(t *testing.T, d *datadriven.TestData) wire.RequestID {
	parts := strings.Split(strArg(d, "req", ""), ".")
	if len(parts) != 3 {
		d.Fatalf(t, "req must be node.incarnation.counter")
	}
	var v [3]uint64
	for i, p := range parts {
		x, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			d.Fatalf(t, "req: %v", err)
		}
		v[i] = x
	}
	return wire.RequestID{Node: wire.NodeID(v[0]), Seq: v[1]<<32 | v[2]}
}

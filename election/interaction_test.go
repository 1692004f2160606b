package election_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
)

// TestInteraction runs the scripted election scenarios in testdata/.
// Rewrite expectations with: go test ./election -run TestInteraction -rewrite
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type hnode struct {
	e         *election.Election // nil while down
	id        election.ID
	persisted *election.Persisted
	inc       uint32 // the store's incarnation counter, persisted
	boot      []wire.NodeID
	saved     *hnode // a copy of the disk, for rollback
	codec     uint64 // what it offers the cluster's level (0: MinVersion)
}

type envelope struct {
	at int
	m  wire.Message
}

// harness: messages sent during one tick are delivered delay ticks later
// (1 unless set); isolated nodes can talk only among themselves.
type harness struct {
	nodes    []*hnode
	size     int
	tick     int
	delay    int
	nonce    uint64
	inflight []envelope
	side     map[wire.NodeID]bool // the isolated side, when partitioned
	adopted  map[string][]int     // view description -> nodes that adopted it
	order    []string
	changes  []string
	out      strings.Builder
}

func (h *harness) printf(format string, args ...any) { fmt.Fprintf(&h.out, format, args...) }

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	h.out.Reset()
	switch d.Cmd {
	case "cluster":
		h.cluster(t, d)
	case "tick":
		n := intArg(t, d, "n", 1)
		h.adopted, h.order, h.changes = map[string][]int{}, nil, nil
		for range n {
			h.step()
		}
		for _, v := range h.order {
			h.printf("%s adopted by %v\n", v, h.adopted[v])
		}
		for _, c := range h.changes {
			h.printf("%s\n", c)
		}
		if len(h.order) == 0 && len(h.changes) == 0 {
			h.printf("no new view\n")
		}
	case "status":
		for i, n := range h.nodes {
			if n.e == nil {
				h.printf("node %d: down\n", i+1)
				continue
			}
			st := n.e.Status()
			line := fmt.Sprintf("node %d: %s", i+1, fmtView(st.View))
			if st.Ready {
				line += " LOCK_READY"
			} else {
				line += " NO_LOCK (" + st.Reason + ")"
			}
			if st.Coordinator {
				line += " coordinator"
			}
			h.printf("%s\n", line)
		}
	case "stats":
		for i, n := range h.nodes {
			if n.e != nil {
				s := n.e.Stats()
				h.printf("node %d: foreign %d, stale lives %d, not checked in %d", i+1, s.Foreign, s.StaleLives, s.NotCheckedIn)
				if s.BelowLevel > 0 {
					h.printf(", below the codec %d", s.BelowLevel)
				}
				h.printf("\n")
			}
		}
	case "crash":
		for _, id := range listArg(t, d, "node") {
			h.nodes[id-1].e = nil
			h.printf("node %d down\n", id)
		}
	case "restart":
		// codec=N: the node comes back offering codec N (another release,
		// or one held back).
		for _, id := range listArg(t, d, "node") {
			if _, ok := d.Arg("codec"); ok {
				h.nodes[id-1].codec = uint64(intArg(t, d, "codec", 0))
			}
			h.start(t, id)
			h.printf("node %d up\n", id)
		}
	case "join", "solo", "misjoin":
		// A new machine: join starts it with no bootstrap (it joins as a
		// non-member); solo with the default flags (a cluster of itself);
		// misjoin with --initial-members naming the nodes up to it, itself
		// included (the operator's mistake: it should have been --join).
		id := len(h.nodes) + 1
		h.nodes = append(h.nodes, &hnode{id: h.newID(id, election.DefaultPriority), codec: uint64(intArg(t, d, "codec", 0))})
		switch d.Cmd {
		case "solo":
			h.nodes[id-1].boot = []wire.NodeID{wire.NodeID(id)}
		case "misjoin":
			for j := 1; j <= id; j++ {
				h.nodes[id-1].boot = append(h.nodes[id-1].boot, wire.NodeID(j))
			}
		}
		h.start(t, id)
		for _, o := range h.nodes {
			if o.e != nil {
				o.e.AddPeer(wire.NodeID(id)) // the mesh announces it
			}
		}
		h.printf("node %d up, %s\n", id, map[string]string{"join": "joining", "solo": "a cluster of itself",
			"misjoin": "bootstrapping another cluster"}[d.Cmd])
	case "wipe":
		// The node's store is lost, its identity stays: it starts from
		// nothing with the same id.
		for _, id := range listArg(t, d, "node") {
			n := h.nodes[id-1]
			n.persisted, n.inc = nil, 0
			h.start(t, id)
			h.printf("node %d up with an empty store\n", id)
		}
	case "save":
		for _, id := range listArg(t, d, "node") {
			n := h.nodes[id-1]
			n.saved = &hnode{persisted: n.persisted, inc: n.inc}
			h.printf("node %d: store copied at incarnation %d\n", id, n.inc)
		}
	case "rollback":
		for _, id := range listArg(t, d, "node") {
			n := h.nodes[id-1]
			n.persisted, n.inc = n.saved.persisted, n.saved.inc
			h.start(t, id)
			h.printf("node %d up from the old copy, incarnation %d\n", id, n.inc)
		}
	case "change":
		id := intArg(t, d, "node", 1)
		c := election.Change{Add: wire.NodeID(intArg(t, d, "add", 0)), Remove: wire.NodeID(intArg(t, d, "remove", 0))}
		if err := h.nodes[id-1].e.ChangeMembers(c); err != nil {
			h.printf("node %d: %s refused: %v\n", id, c, err)
		} else {
			h.printf("node %d: %s started\n", id, c)
			h.ready(id)
		}
	case "vouch":
		// The operator vouches for the node's store (sluice members vouch).
		id := intArg(t, d, "node", 1)
		if err := h.nodes[id-1].e.VouchStore(); err != nil {
			h.printf("node %d: vouch refused: %v\n", id, err)
		} else {
			h.printf("node %d: store vouched for\n", id)
			h.ready(id)
		}
	case "delay":
		h.delay = intArg(t, d, "n", 1)
	case "partition":
		h.side = map[wire.NodeID]bool{}
		for _, id := range listArg(t, d, "side") {
			h.side[wire.NodeID(id)] = true
		}
	case "heal":
		h.side = nil
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	if h.out.Len() == 0 {
		return "ok\n"
	}
	return h.out.String()
}

func (h *harness) newID(i int, p uint8) election.ID {
	// The random part decides among equal priorities: here it keeps node
	// order, so scenarios read easily.
	return election.ID{Priority: p, Random: uint32(i) * 0x1000,
		Address: fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 4000+i), PID: uint32(100 + i), Name: fmt.Sprintf("node%d", i)}
}

// cluster nodes=N [off=I,J] [priority=I:P,...] [down=I,J]: nodes 1..N,
// bootstrapped as the members.
func (h *harness) cluster(t *testing.T, d *datadriven.TestData) {
	h.size = intArg(t, d, "nodes", 5)
	h.nodes, h.inflight, h.side, h.tick, h.delay = nil, nil, nil, 0, 1
	prio := map[int]uint8{}
	for _, id := range listArg(t, d, "off") {
		prio[id] = election.Off
	}
	if a, ok := d.Arg("priority"); ok {
		for _, v := range a.Vals {
			k, p, _ := strings.Cut(v, ":")
			id, _ := strconv.Atoi(k)
			pr, err := election.ParsePriority(p)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			prio[id] = pr
		}
	}
	down := listArg(t, d, "down")
	var boot []wire.NodeID
	for i := 1; i <= h.size; i++ {
		boot = append(boot, wire.NodeID(i))
	}
	for i := 1; i <= h.size; i++ {
		p, ok := prio[i]
		if !ok {
			p = election.DefaultPriority
		}
		h.nodes = append(h.nodes, &hnode{id: h.newID(i, p), boot: boot, codec: uint64(intArg(t, d, "codec", 0))})
		if !slices.Contains(down, i) {
			h.start(t, i)
		}
	}
	h.printf("%d nodes", h.size)
	if len(down) > 0 {
		h.printf(", down %v", down)
	}
	h.printf(", quorum %d\n", election.Quorum(h.size))
}

func (h *harness) start(t *testing.T, id int) {
	n := h.nodes[id-1]
	var peers []wire.NodeID
	for i := 1; i <= len(h.nodes); i++ {
		peers = append(peers, wire.NodeID(i))
	}
	n.inc++ // the store counts every start
	h.nonce++
	e, err := election.New(election.Config{Node: wire.NodeID(id), ID: n.id, Bootstrap: n.boot, Peers: peers,
		Incarnation: n.inc, Nonce: h.nonce, Codec: n.codec, Release: fmt.Sprintf("r%d", max(n.codec, 3))}, n.persisted)
	if err != nil {
		t.Fatal(err)
	}
	n.e = e
	h.ready(id)
}

func (h *harness) step() {
	h.tick++
	var deliver []envelope
	rest := h.inflight[:0:0]
	for _, env := range h.inflight {
		if env.at <= h.tick {
			deliver = append(deliver, env)
		} else {
			rest = append(rest, env)
		}
	}
	h.inflight = rest
	for _, env := range deliver {
		m := env.m
		to := h.nodes[m.To-1]
		if to.e == nil || h.side != nil && h.side[m.From] != h.side[m.To] {
			continue
		}
		_ = to.e.Step(m)
		h.ready(int(m.To))
	}
	for i, n := range h.nodes {
		if n.e != nil {
			n.e.Tick()
			h.ready(i + 1)
		}
	}
}

func (h *harness) ready(id int) {
	n := h.nodes[id-1]
	for n.e.HasReady() {
		rd := n.e.Ready()
		if rd.Persist != nil {
			n.persisted = rd.Persist
		}
		for _, m := range rd.Messages {
			if int(m.To) <= len(h.nodes) {
				h.inflight = append(h.inflight, envelope{at: h.tick + h.delay, m: m})
			}
		}
		if rd.View != nil {
			v := fmtView(*rd.View)
			if _, ok := h.adopted[v]; !ok {
				h.order = append(h.order, v)
			}
			h.adopted[v] = append(h.adopted[v], id)
		}
		for _, c := range rd.Changes {
			if c.Err != nil {
				h.changes = append(h.changes, fmt.Sprintf("node %d: %s failed: %v", id, c.Change, c.Err))
			} else {
				h.changes = append(h.changes, fmt.Sprintf("node %d: %s committed in e%d", id, c.Change, c.Epoch))
			}
		}
		n.e.Advance()
	}
}

func fmtView(v wire.View) string {
	if v.Epoch == 0 {
		return "no view"
	}
	s := fmt.Sprintf("e%d leaders %v", v.Epoch, v.Leaders)
	if !slices.Equal(v.Members, v.PrevMembers) {
		s += fmt.Sprintf(" members %v", v.Members)
	}
	if v.PrevEpoch > 0 {
		s += fmt.Sprintf(" (after e%d %v)", v.PrevEpoch, v.PrevLeaders)
	}
	if v.Level > 0 {
		s += fmt.Sprintf(" codec %d", v.Level)
	}
	return s
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		v, err := strconv.Atoi(a.Vals[0])
		if err != nil {
			d.Fatalf(t, "%s: %v", key, err)
		}
		return v
	}
	return def
}

func listArg(t *testing.T, d *datadriven.TestData, key string) []int {
	var out []int
	if a, ok := d.Arg(key); ok {
		for _, v := range a.Vals {
			x, err := strconv.Atoi(v)
			if err != nil {
				d.Fatalf(t, "%s: %v", key, err)
			}
			out = append(out, x)
		}
	}
	return out
}

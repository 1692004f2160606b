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
}

// harness: messages sent during one tick are delivered at the next one;
// isolated nodes can talk only among themselves.
type harness struct {
	nodes    []*hnode
	size     int
	tick     int
	inflight []wire.Message
	side     map[wire.NodeID]bool // the isolated side, when partitioned
	adopted  map[string][]int     // view description -> nodes that adopted it
	order    []string
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
		h.adopted, h.order = map[string][]int{}, nil
		for range n {
			h.step()
		}
		for _, v := range h.order {
			h.printf("%s adopted by %v\n", v, h.adopted[v])
		}
		if len(h.order) == 0 {
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
	case "crash":
		for _, id := range listArg(t, d, "node") {
			h.nodes[id-1].e = nil
			h.printf("node %d down\n", id)
		}
	case "restart":
		for _, id := range listArg(t, d, "node") {
			h.start(t, id)
			h.printf("node %d up\n", id)
		}
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

// cluster nodes=N [off=I,J] [priority=I:P,...] [down=I,J]
func (h *harness) cluster(t *testing.T, d *datadriven.TestData) {
	h.size = int(intArg(t, d, "nodes", 5))
	h.nodes, h.inflight, h.side, h.tick = nil, nil, nil, 0
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
	for i := 1; i <= h.size; i++ {
		p, ok := prio[i]
		if !ok {
			p = election.DefaultPriority
		}
		// The random part decides among equal priorities: here it keeps
		// node order, so scenarios read easily.
		h.nodes = append(h.nodes, &hnode{id: election.ID{Priority: p, Random: uint32(i) * 0x1000,
			Address: fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 4000+i), PID: uint32(100 + i), Name: fmt.Sprintf("node%d", i)}})
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
	for i := 1; i <= h.size; i++ {
		peers = append(peers, wire.NodeID(i))
	}
	e, err := election.New(election.Config{Node: wire.NodeID(id), ID: n.id, ClusterSize: h.size, Peers: peers}, n.persisted)
	if err != nil {
		t.Fatal(err)
	}
	n.e = e
}

func (h *harness) step() {
	h.tick++
	deliver := h.inflight
	h.inflight = nil
	for _, m := range deliver {
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
		h.inflight = append(h.inflight, rd.Messages...)
		if rd.View != nil {
			v := fmtView(*rd.View)
			if _, ok := h.adopted[v]; !ok {
				h.order = append(h.order, v)
			}
			h.adopted[v] = append(h.adopted[v], id)
		}
		n.e.Advance()
	}
}

func fmtView(v wire.View) string {
	if v.Epoch == 0 {
		return "no view"
	}
	s := fmt.Sprintf("e%d leaders %v", v.Epoch, v.Leaders)
	if v.PrevEpoch > 0 {
		s += fmt.Sprintf(" (after e%d %v)", v.PrevEpoch, v.PrevLeaders)
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

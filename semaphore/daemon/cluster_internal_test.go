package daemon

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/api"
)

// TestMergeTables: a request any leader lists is in the merge, with the
// highest ticket, any mark, the earliest since, the latest until, and how
// many tables list it; entries in bakery order, choosing ones last.
func TestMergeTables(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := &api.Table{Node: "1", Leader: true, Locks: []api.Lock{{Name: "/s", HighWater: 3, Entries: []api.Entry{
		{Request: "4.1.1", Ticket: 3, State: "ticket", Mode: "exclusive", Holder: true, Since: t0, Until: t0.Add(time.Minute)},
		{Request: "5.1.1", Ticket: 0, State: "choosing", Mode: "read-only", Since: t0, Until: t0.Add(time.Second)},
	}}}}
	b := &api.Table{Node: "2", Leader: true, Locks: []api.Lock{{Name: "/s", HighWater: 4, Entries: []api.Entry{
		{Request: "5.1.1", Ticket: 4, State: "ticket", Mode: "read-only", Active: true, Since: t0.Add(time.Second), Until: t0.Add(time.Hour)},
		{Request: "4.1.1", Ticket: 3, State: "ticket", Mode: "exclusive", Since: t0.Add(-time.Second), Until: t0.Add(time.Minute)},
		{Request: "6.1.1", Ticket: 0, State: "choosing", Mode: "exclusive", Since: t0, Until: t0},
	}}, {Name: "/t", HighWater: 1}}}
	m := mergeTables([]*api.Table{b, a})
	if len(m.MergedFrom) != 2 || m.MergedFrom[0] != "1" || len(m.Locks) != 2 || m.Locks[0].Name != "/s" || m.Locks[0].HighWater != 4 {
		t.Fatalf("merge: %+v", m)
	}
	es := m.Locks[0].Entries
	if len(es) != 3 || es[0].Request != "4.1.1" || es[1].Request != "5.1.1" || es[2].Request != "6.1.1" {
		t.Fatalf("entries: %+v", es)
	}
	if e := es[0]; !e.Holder || e.Leaders != 2 || !e.Since.Equal(t0.Add(-time.Second)) {
		t.Errorf("4.1.1: %+v", e)
	}
	if e := es[1]; e.Ticket != 4 || e.State != "ticket" || !e.Active || e.Leaders != 2 || !e.Since.Equal(t0) || !e.Until.Equal(t0.Add(time.Hour)) {
		t.Errorf("5.1.1: %+v", e)
	}
	if e := es[2]; e.Leaders != 1 || e.Ticket != 0 {
		t.Errorf("6.1.1: %+v", e)
	}
}

// TestAgentWord: owners by request, and readers on shared read tickets by
// node and name, from agents that count them (SharedReaders, with their
// per-reader requests left out) and from older ones that list them.
func TestAgentWord(t *testing.T) {
	w := agentWord{owners: map[string]string{}, readers: map[string]map[string]int{}}
	w.add(&api.Table{Node: "7", SharedReaders: map[string]int{"/s": 3},
		Requests: []api.OwnRequest{{Request: "7.1.9", Name: "/job", Phase: "held", Owner: "ops@web-7 pid 1: make"}}})
	w.add(&api.Table{Node: "8", Requests: []api.OwnRequest{
		{Request: "8.1.2", Name: "/s", Phase: heldShared}, {Request: "8.1.3", Name: "/s", Phase: heldShared},
		{Request: "8.1.4", Name: "/t", Phase: "waiting-shared"}}})
	w.add(&api.Table{Node: "9"})
	if w.owners["7.1.9"] != "ops@web-7 pid 1: make" || w.readers["7"]["/s"] != 3 || w.readers["8"]["/s"] != 2 ||
		w.readers["8"]["/t"] != 0 || w.readers["9"] == nil || w.readers["9"]["/s"] != 0 {
		t.Fatalf("agents' word: %+v", w)
	}
}

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore/api"
)

// fakeAgents answers table queries as the agents of the nodes it lists;
// the others do not answer.
type fakeAgents map[wire.NodeID]api.Table

func (f fakeAgents) Query(_ context.Context, node wire.NodeID, _ []byte) ([]byte, error) {
	t, ok := f[node]
	if !ok {
		return nil, errors.New("no route to the node")
	}
	return json.Marshal(t)
}

// TestReadersBelow: an agent's intent-shared entry on a name counts that
// agent's page views on the names below it, by NamePath's levels (not a
// string prefix: /site/shopping is not under /site/shop, /sitemap not
// under /site), split by the level directly below; a read-only entry
// counts those of its name alone. One agent's word comes with the table
// at hand, another's by asking it, a third's from its listed requests (an
// agent from before SharedReaders); one that does not answer leaves its
// entries' readers unknown.
func TestReadersBelow(t *testing.T) {
	held := func(req, node, mode string) api.Entry {
		return api.Entry{Request: req, Node: node, Mode: mode, State: "ticket", Active: true, Holder: true}
	}
	merged := api.Table{Node: "1", Leader: true, Locks: []api.Lock{
		{Name: "/site", Entries: []api.Entry{
			held("1.1.1", "1", "intent-shared"),
			held("1.1.2", "1", "read-only"),
			held("2.1.1", "2", "intent-shared"),
			held("3.1.1", "3", "intent-shared"),
			held("4.1.1", "4", "intent-shared"),
			// A reader below /site with a ticket of its own: one reader, no share.
			{Request: "1.1.3", Node: "1", Mode: "intent-shared", State: "ticket", Holder: true},
		}},
		{Name: "/site/shop", Entries: []api.Entry{held("1.1.4", "1", "intent-shared"), held("2.1.2", "2", "intent-shared")}},
		{Name: "/site/shop/cart", Entries: []api.Entry{held("1.1.5", "1", "read-only"), held("2.1.3", "2", "read-only")}},
		{Name: "/site/shopping", Entries: []api.Entry{held("2.1.4", "2", "read-only")}},
		{Name: "https://shop.example/", Entries: []api.Entry{held("2.1.5", "2", "intent-shared")}},
	}}
	own := &api.Table{Node: "1", Leader: true, SharedReaders: map[string]int{
		"/site": 1, "/site/shop": 2, "/site/shop/cart": 4, "/site/blog/post": 3,
	}}
	agents := fakeAgents{
		2: {Node: "2", SharedReaders: map[string]int{
			"/site/shop/cart": 1, "/site/shopping": 5, "/sitemap": 7, "/site//bad": 9,
			"HTTPS://Shop.Example:443/shop/cart": 2,
		}},
		3: {Node: "3", Requests: []api.OwnRequest{
			{Request: "3.1.7", Name: "/site/blog/post", Phase: heldShared},
			{Request: "3.1.8", Name: "/site/blog", Phase: heldShared},
			{Request: "3.1.9", Name: "/site/news", Phase: "waiting-shared"},
		}},
	}
	(&Node{}).addAgentsWord(t.Context(), agents, nil, &merged, []*api.Table{own})

	type want struct {
		readers int // -1: unknown
		below   map[string]int
	}
	wants := map[string]want{
		"1.1.1": {9, map[string]int{"/site/shop": 6, "/site/blog": 3}},
		"1.1.2": {1, nil},
		"2.1.1": {6, map[string]int{"/site/shop": 1, "/site/shopping": 5}},
		"3.1.1": {2, map[string]int{"/site/blog": 2}},
		"4.1.1": {-1, nil},
		"1.1.3": {-1, nil},
		"1.1.4": {4, map[string]int{"/site/shop/cart": 4}},
		"2.1.2": {1, map[string]int{"/site/shop/cart": 1}},
		"1.1.5": {4, nil},
		"2.1.3": {1, nil},
		"2.1.4": {5, nil},
		"2.1.5": {2, map[string]int{"https://shop.example/shop": 2}},
	}
	for _, l := range merged.Locks {
		for _, e := range l.Entries {
			w, ok := wants[e.Request]
			if !ok {
				t.Fatalf("no want for %s", e.Request)
			}
			got := -1
			if e.Readers != nil {
				got = *e.Readers
			}
			if got != w.readers || !maps.Equal(e.ReadersBelow, w.below) {
				t.Errorf("%s %s of node %s: readers %d below %v, want %d below %v", l.Name, e.Mode, e.Node, got, e.ReadersBelow, w.readers, w.below)
			}
		}
	}

	// The breakdown is in the JSON of intent-shared entries only.
	b, err := json.Marshal(merged.Locks[0].Entries[:2])
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); strings.Count(s, `"readers_below":{"/site/blog":3,"/site/shop":6}`) != 1 || strings.Count(s, "readers_below") != 1 {
		t.Errorf("JSON: %s", s)
	}
}

// TestReadersBelowLevels: every parent level of a name counts its
// readers, each under its own child on the way; a name without parents,
// or one NamePath refuses, is under nothing.
func TestReadersBelowLevels(t *testing.T) {
	got := readersBelow(map[string]int{
		"/a/b/c": 2, "/a/b": 1, "/a/bc": 4, "/a": 8, "flat": 16, "/a/./b": 32, "/a/x": 0,
		"https://s.example/cart?id=3": 64,
	})
	want := map[string]levelReaders{
		"/a":                     {7, map[string]int{"/a/b": 3, "/a/bc": 4}},
		"/a/b":                   {2, map[string]int{"/a/b/c": 2}},
		"https://s.example/":     {64, map[string]int{"https://s.example/cart": 64}},
		"https://s.example/cart": {64, map[string]int{"https://s.example/cart?id=3": 64}},
	}
	if len(got) != len(want) {
		t.Errorf("levels %v, want %v", slices.Sorted(maps.Keys(got)), want)
	}
	for level, w := range want {
		g := got[level]
		if g == nil || g.total != w.total || !maps.Equal(g.byChild, w.byChild) {
			t.Errorf("%s: %+v, want %+v", level, g, w)
		}
	}
}

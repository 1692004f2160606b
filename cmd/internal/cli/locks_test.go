package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/api"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func sharedEntry(req, node, mode string, readers int, below map[string]int) api.Entry {
	return api.Entry{Request: req, Node: node, NodeName: "web-" + node, Ticket: 1, Mode: mode, State: "ticket", Active: true,
		Holder: true, Since: t0, Until: t0.Add(time.Minute), Readers: &readers, ReadersBelow: below}
}

// siteTable is a merged table of the names starting with /site while a
// drain of /site waits: the page views of two agents on their shared
// tickets (node 1: 4 on /site/shop, 1 on /site/shop/cart, 2 on
// /site/blog/post; node 2: 3 on /site/shop/cart, 6 on /site/shopping, 1
// on /site itself), a reader of /site/blog with tickets of its own (node
// 3), and /sitemap, which starts with /site and is not below it.
func siteTable() api.Table {
	plain := func(req, mode string) api.Entry {
		return api.Entry{Request: req, Node: "3", NodeName: "ops", Ticket: 2, Mode: mode, State: "ticket", Holder: true,
			Since: t0.Add(time.Second), Until: t0.Add(time.Minute)}
	}
	drain := api.Entry{Request: "3.1.9", Node: "3", NodeName: "ops", Ticket: 5, Mode: "read-write-priority", State: "ticket",
		Since: t0.Add(2 * time.Second), Until: t0.Add(time.Hour), Owner: "ops@admin pid 7: deploy.sh", Reason: "upgrade"}
	return api.Table{Node: "1", NodeName: "web-1", Leader: true, MergedFrom: []string{"1", "2", "3"}, Locks: []api.Lock{
		{Name: "/site", Entries: []api.Entry{
			sharedEntry("1.1.1", "1", "intent-shared", 7, map[string]int{"/site/shop": 5, "/site/blog": 2}),
			sharedEntry("2.1.1", "2", "intent-shared", 9, map[string]int{"/site/shop": 3, "/site/shopping": 6}),
			sharedEntry("2.1.2", "2", "read-only", 1, nil),
			plain("3.1.5", "intent-shared"),
			drain,
		}},
		{Name: "/site/blog", Entries: []api.Entry{
			sharedEntry("1.1.2", "1", "intent-shared", 2, map[string]int{"/site/blog/post": 2}),
			plain("3.1.6", "read-only"),
		}},
		{Name: "/site/blog/post", Entries: []api.Entry{sharedEntry("1.1.3", "1", "read-only", 2, nil)}},
		{Name: "/site/shop", Entries: []api.Entry{
			sharedEntry("1.1.4", "1", "intent-shared", 1, map[string]int{"/site/shop/cart": 1}),
			sharedEntry("1.1.5", "1", "read-only", 4, nil),
			sharedEntry("2.1.3", "2", "intent-shared", 3, map[string]int{"/site/shop/cart": 3}),
		}},
		{Name: "/site/shop/cart", Entries: []api.Entry{sharedEntry("1.1.6", "1", "read-only", 1, nil), sharedEntry("2.1.4", "2", "read-only", 3, nil)}},
		{Name: "/site/shopping", Entries: []api.Entry{sharedEntry("2.1.5", "2", "read-only", 6, nil)}},
		{Name: "/sitemap", Entries: []api.Entry{sharedEntry("1.1.7", "1", "read-only", 5, nil)}},
	}}
}

// TestDrainLine: a drain of /site counts the readers it waits for on
// /site and below it, every agent's, and splits them by the levels
// directly below /site (by NamePath: /site/shopping is not /site/shop's,
// /sitemap not /site's, /site/shop/cart counted once, in /site/shop).
func TestDrainLine(t *testing.T) {
	left := drainReaders(siteTable(), "/site")
	want := "draining /site (hard): 18 readers left (/site/shop 8, /site/shopping 6, /site/blog 3, /site itself 1), waiting 3s"
	if got := drainLine("/site", "hard", left, 3*time.Second+200*time.Millisecond); got != want {
		t.Errorf("drain of /site:\n got %s\nwant %s", got, want)
	}
	t.Logf("%s", want)

	for _, tc := range []struct {
		name string
		tab  api.Table
		want string
	}{
		// A level below: its readers and those below it, cart's one level down.
		{"/site/shop", siteTable(), "8 readers left (/site/shop/cart 4, /site/shop itself 4)"},
		// Without children in the table: the count alone, as before.
		{"/site/shopping", siteTable(), "6 readers left"},
		{"/sitemap", siteTable(), "5 readers left"},
		{"/nothing", siteTable(), "0 readers left"},
		// Only this agent's requests: no table to count from.
		{"/site", api.Table{Node: "1"}, "unknown readers left"},
		// Levels with none left are not listed; past four, the others summed.
		{"/a", api.Table{Leader: true, Locks: []api.Lock{
			{Name: "/a/1", Entries: []api.Entry{sharedEntry("1.1.1", "1", "read-only", 1, nil)}},
			{Name: "/a/2", Entries: []api.Entry{sharedEntry("1.1.2", "1", "read-only", 2, nil)}},
			{Name: "/a/3", Entries: []api.Entry{sharedEntry("1.1.3", "1", "read-only", 3, nil)}},
			{Name: "/a/4", Entries: []api.Entry{sharedEntry("1.1.4", "1", "read-only", 4, nil)}},
			{Name: "/a/5", Entries: []api.Entry{sharedEntry("1.1.5", "1", "read-only", 5, nil)}},
			{Name: "/a/6", Entries: []api.Entry{sharedEntry("1.1.6", "1", "read-only", 6, nil)}},
			{Name: "/a/7", Entries: []api.Entry{sharedEntry("1.1.7", "1", "read-only", 0, nil)}},
		}}, "0 readers left (/a/6 6, /a/5 5, /a/4 4, /a/3 3, 3 more on 2 other names)"},
		{"/a", api.Table{Leader: true, Locks: []api.Lock{
			{Name: "/a", Entries: []api.Entry{sharedEntry("1.1.1", "1", "read-only", 2, nil), sharedEntry("1.1.2", "1", "intent-shared", 15, nil)}},
			{Name: "/a/1", Entries: []api.Entry{sharedEntry("1.1.3", "1", "read-only", 1, nil)}},
			{Name: "/a/2", Entries: []api.Entry{sharedEntry("1.1.4", "1", "read-only", 2, nil)}},
			{Name: "/a/3", Entries: []api.Entry{sharedEntry("1.1.5", "1", "read-only", 3, nil)}},
			{Name: "/a/4", Entries: []api.Entry{sharedEntry("1.1.6", "1", "read-only", 4, nil)}},
			{Name: "/a/5", Entries: []api.Entry{sharedEntry("1.1.7", "1", "read-only", 5, nil)}},
		}}, "17 readers left (/a/5 5, /a/4 4, /a/3 3, /a/2 2, /a itself 2, 1 more on 1 other name)"},
	} {
		if got := drainReaders(tc.tab, tc.name).String(); got != tc.want {
			t.Errorf("drain of %s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestLocksTree: names that nest print as a tree, each under its parent
// level, siblings in order; the intent entries with their mode and the
// readers below each agent's shared intent ticket; this agent's own page
// view, not in the table, under its name.
func TestLocksTree(t *testing.T) {
	tab := siteTable()
	tab.Requests = []api.OwnRequest{
		{Request: "1.9.1", Name: "/site/blog/post", Mode: "read-only", Phase: "held-shared", Since: t0}, // counted by its share's row
		{Request: "1.9.2", Name: "/site/news/today", Mode: "read-only", Phase: "waiting-shared", Since: t0, Owner: "frontend"},
	}
	var b bytes.Buffer
	printLocksAt(&b, tab, t0.Add(10*time.Second))
	want := `NAME                 MODE                 TOKEN  REQUEST  NODE   STATE           SINCE     AGE  EXPIRES    OWNER
/site                intent-shared        1      1.1.1    web-1  holder          10:00:00  10s  <10:01:00  shared intent ticket, readers below: 7 (/site/shop 5, /site/blog 2)
/site                intent-shared        1      2.1.1    web-2  holder          10:00:00  10s  <10:01:00  shared intent ticket, readers below: 9 (/site/shopping 6, /site/shop 3)
/site                read-only            1      2.1.2    web-2  holder          10:00:00  10s  <10:01:00  shared read ticket, readers on it: 1
/site                intent-shared        2      3.1.5    ops    holder          10:00:01  9s   <10:01:00  -
/site                read-write-priority  5      3.1.9    ops    waiting         10:00:02  8s   -          ops@admin pid 7: deploy.sh — "upgrade"
  /site/blog         intent-shared        1      1.1.2    web-1  holder          10:00:00  10s  <10:01:00  shared intent ticket, readers below: 2 (/site/blog/post 2)
  /site/blog         read-only            2      3.1.6    ops    holder          10:00:01  9s   <10:01:00  -
    /site/blog/post  read-only            1      1.1.3    web-1  holder          10:00:00  10s  <10:01:00  shared read ticket, readers on it: 2
  /site/news/today   read-only            0      1.9.2    web-1  waiting-shared  10:00:00  10s  -          frontend
  /site/shop         intent-shared        1      1.1.4    web-1  holder          10:00:00  10s  <10:01:00  shared intent ticket, readers below: 1 (/site/shop/cart 1)
  /site/shop         read-only            1      1.1.5    web-1  holder          10:00:00  10s  <10:01:00  shared read ticket, readers on it: 4
  /site/shop         intent-shared        1      2.1.3    web-2  holder          10:00:00  10s  <10:01:00  shared intent ticket, readers below: 3 (/site/shop/cart 3)
    /site/shop/cart  read-only            1      1.1.6    web-1  holder          10:00:00  10s  <10:01:00  shared read ticket, readers on it: 1
    /site/shop/cart  read-only            1      2.1.4    web-2  holder          10:00:00  10s  <10:01:00  shared read ticket, readers on it: 3
  /site/shopping     read-only            1      2.1.5    web-2  holder          10:00:00  10s  <10:01:00  shared read ticket, readers on it: 6
/sitemap             read-only            1      1.1.7    web-1  holder          10:00:00  10s  <10:01:00  shared read ticket, readers on it: 5
`
	if got := b.String(); got != want {
		t.Errorf("locks /site:\n%s\nwant:\n%s", got, want)
	}
	t.Logf("sluice locks /site:\n%s", b.String())
}

// TestLocksFlat: names without parents print as before the tree: in the
// table's order, this agent's requests not in it after them, unindented.
func TestLocksFlat(t *testing.T) {
	tab := api.Table{Node: "1", NodeName: "web-1", Leader: true, MergedFrom: []string{"1"}, Locks: []api.Lock{
		{Name: "jobs", Entries: []api.Entry{{Request: "1.1.1", Node: "1", NodeName: "web-1", Ticket: 3, Mode: "exclusive", State: "ticket",
			Holder: true, Since: t0, Until: t0.Add(time.Minute), Owner: "cron"}}},
		{Name: "/old", Entries: []api.Entry{sharedEntry("2.1.1", "2", "read-only", 2, nil)}},
	}, Requests: []api.OwnRequest{{Request: "1.9.1", Name: "aardvark", Mode: "exclusive", Phase: "queued", Since: t0},
		{Request: "1.9.2", Name: "/new", Mode: "read-only", Phase: "held-shared", Since: t0, Owner: "frontend", PageViews: new(12)}}}
	var b bytes.Buffer
	printLocksAt(&b, tab, t0.Add(time.Minute))
	want := `NAME      MODE       TOKEN  REQUEST  NODE   STATE        SINCE     AGE   EXPIRES    OWNER
jobs      exclusive  3      1.1.1    web-1  holder       10:00:00  1m0s  <10:01:00  cron
/old      read-only  1      2.1.1    web-2  holder       10:00:00  1m0s  <10:01:00  shared read ticket, readers on it: 2
aardvark  exclusive  0      1.9.1    web-1  queued       10:00:00  1m0s  -          -
/new      read-only  0      1.9.2    web-1  held-shared  10:00:00  1m0s  -          frontend — lent to page views: 12
`
	if got := b.String(); got != want {
		t.Errorf("flat locks:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(want, "  /") {
		t.Fatal("a flat name indented")
	}
}

// TestLocksOtherDay: a time of another day shows its date: a drain kept
// after its command failed expires in 720h, which as a bare clock would
// read as the time it was granted.
func TestLocksOtherDay(t *testing.T) {
	kept := t0.Add(720 * time.Hour)
	tab := api.Table{Node: "1", NodeName: "ops", Leader: true, MergedFrom: []string{"1"}, Locks: []api.Lock{
		{Name: "/site", Entries: []api.Entry{{Request: "1.1.1", Node: "1", NodeName: "ops", Ticket: 3, Mode: "read-write-priority",
			State: "ticket", Holder: true, Since: t0.Add(-25 * time.Hour), Until: kept.Add(time.Minute), Owner: "deploy.sh"}}},
	}, Requests: []api.OwnRequest{{Request: "1.1.1", Name: "/site", Mode: "read-write-priority", Phase: "held", Ticket: 3,
		Since: t0.Add(-25 * time.Hour), Expires: kept}}}
	var b bytes.Buffer
	printLocksAt(&b, tab, t0)
	want := `NAME   MODE                 TOKEN  REQUEST  NODE  STATE  SINCE                AGE      EXPIRES              OWNER
/site  read-write-priority  3      1.1.1    ops   held   ` + t0.Add(-25*time.Hour).Format(time.DateTime) + `  25h0m0s  ` + kept.Format(time.DateTime) + `  deploy.sh
`
	if got := b.String(); got != want {
		t.Errorf("locks:\n%s\nwant:\n%s", got, want)
	}
}

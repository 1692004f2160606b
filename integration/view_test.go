package integration

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/api"
)

// TestClusterViewFromAnyAgent: on a cluster of four real agents, `sluice
// locks` on the one that is not a leader shows the lock a leader's client
// holds (the leaders' tables, merged), drain progress there counts the
// readers, and `unlock --force NAME` there releases the holder.
func TestClusterViewFromAnyAgent(t *testing.T) {
	c := newFaultCluster(t, 4, false)
	c.startAll()
	defer c.stopAll()
	leaders := c.leaders(0)
	plain := c.others(leaders...)
	if len(plain) != 1 {
		t.Fatalf("leaders %v of 4 nodes", leaders)
	}
	l, p := c.nodes[leaders[0]], c.nodes[plain[0]]
	holder := start(t, "lock", "/shop", "--api", l.sock, "--", "sh", "-c", "echo holding; exec sleep 30")
	holder.waitLine(t, "holding")

	code, out, errs := sluice(t, p.sock, "locks")
	if code != 0 || !strings.Contains(out, "/shop") || !strings.Contains(out, "holder") || strings.Contains(out, "not a leader") {
		t.Fatalf("locks on a non-leader: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("sluice locks on node %d (not a leader) while node %d's client holds /shop:\n%s", plain[0]+1, leaders[0]+1, out)
	// The holder's node by its name (the agents are started with --name nI).
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[0] == "/shop" && f[4] != fmt.Sprintf("n%d", leaders[0]+1) {
			t.Fatalf("the NODE column of /shop is %q, want the holder's node name n%d:\n%s", f[4], leaders[0]+1, out)
		}
	}
	// Who holds it: the holder's agent tells (sluice lock sends user@host,
	// pid and command line).
	if want := fmt.Sprintf("pid %d: sh -c echo holding; exec sleep 30", holder.cmd.Process.Pid); !strings.Contains(out, want) {
		t.Fatalf("locks on a non-leader lacks the owner %q:\n%s", want, out)
	}
	code, out, errs = sluice(t, p.sock, "locks", "--json")
	if code != 0 || !strings.Contains(out, `"merged_from"`) || !strings.Contains(out, `"leaders": `) ||
		!strings.Contains(out, fmt.Sprintf(`"node_name": "n%d"`, leaders[0]+1)) {
		t.Fatalf("locks --json on a non-leader: exit %d\n%s%s", code, out, errs)
	}

	// Every leader's own table has the holder's number: none keeps a
	// choosing flag without one (a leader whose ENTER ack came too late for
	// ADD_TICKET takes it from EXITING).
	for _, i := range leaders {
		waitLocalTicket(t, c.nodes[i].sock, "/shop")
	}

	// By token, from the non-leader: a token no ticket has is unknown.
	if code, _, errs := sluice(t, p.sock, "unlock", "--force", "/shop", "--token", "999"); code == 0 || !strings.Contains(errs, "no ticket 999") {
		t.Fatalf("unlock --force --token 999 on a non-leader: exit %d %q", code, errs)
	}
	// An operator on the non-leader releases the holder by its token (the
	// name's first ticket)...
	code, out, errs = sluice(t, p.sock, "unlock", "--force", "/shop", "--token", "1")
	if code != 0 || !strings.Contains(out, "released ") {
		t.Fatalf("unlock --force --token 1 on a non-leader: exit %d %q %q", code, out, errs)
	}
	if code := holder.wait(t); code != 76 {
		t.Fatalf("the holder's sluice lock exited %d, want 76 (lease lost)", code)
	}
	// ...and another by name.
	other := start(t, "lock", "/cart", "--api", l.sock, "--", "sh", "-c", "echo holding; exec sleep 30")
	other.waitLine(t, "holding")
	code, out, errs = sluice(t, p.sock, "unlock", "--force", "/cart")
	if code != 0 || !strings.Contains(out, "released ") {
		t.Fatalf("unlock --force on a non-leader: exit %d %q %q", code, out, errs)
	}
	if code := other.wait(t); code != 76 {
		t.Fatalf("the other holder's sluice lock exited %d, want 76 (lease lost)", code)
	}
	if code, _, errs := sluice(t, p.sock, "lock", "/shop", "--try", "--", "true"); code != 0 {
		t.Fatalf("the name is not free after the force-unlock: exit %d %q", code, errs)
	}
}

// TestCLILocksFilters: --older-than leaves out what is younger, a negative
// one is bad usage, a prefix with no names is an empty table, and --watch
// shows the table again until Ctrl-C.
func TestCLILocksFilters(t *testing.T) {
	sock := startDev(t)
	holder := start(t, "lock", "/old", "--api", sock, "--", "sh", "-c", "echo holding; exec sleep 30")
	holder.waitLine(t, "holding")
	if code, out, errs := sluice(t, sock, "locks"); code != 0 || !strings.Contains(out, "/old") || !strings.Contains(out, "AGE") {
		t.Fatalf("locks: %d %q %q", code, out, errs)
	}
	if code, out, errs := sluice(t, sock, "locks", "--older-than", "1h"); code != 0 || strings.Contains(out, "/old") {
		t.Fatalf("locks --older-than 1h: %d %q %q", code, out, errs)
	}
	if code, out, errs := sluice(t, sock, "locks", "--older-than", "0s"); code != 0 || !strings.Contains(out, "/old") {
		t.Fatalf("locks --older-than 0s: %d %q %q", code, out, errs)
	}
	if code, out, errs := sluice(t, sock, "locks", "/nothing/here"); code != 0 || strings.Contains(out, "/old") || errs != "" {
		t.Fatalf("locks of a prefix with no names: %d %q %q", code, out, errs)
	}
	code, _, errs := sluice(t, sock, "locks", "--older-than", "-1s")
	if code != 64 {
		t.Fatalf("locks --older-than -1s: exit %d %q", code, errs)
	}
	oneLine(t, errs)
	w := start(t, "locks", "--api", sock, "--watch")
	w.waitLine(t, "/old")
	w.waitLine(t, "/old") // shown again
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t); code != 0 {
		t.Fatalf("locks --watch after Ctrl-C: exit %d", code)
	}
	// A watch of a prefix with no names: the empty table, again and again.
	w = start(t, "locks", "/nothing/here", "--api", sock, "--watch")
	w.waitLine(t, "NAME")
	w.waitLine(t, "NAME")
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t); code != 0 || strings.Contains(w.output.String(), "/old") {
		t.Fatalf("locks /nothing/here --watch: exit %d\n%s", code, w.output)
	}
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	holder.wait(t)
}

// TestDrainCountsSharedReaders: readers on a non-leader agent's shared
// read ticket are counted one by one from any agent: `sluice locks` on a
// leader shows the ticket with its readers (one row, not one per reader),
// and a drain started on a third agent shows them leaving one by one, then
// runs its command.
func TestDrainCountsSharedReaders(t *testing.T) {
	c := newFaultCluster(t, 4, false)
	c.startAll()
	defer c.stopAll()
	leaders := c.leaders(0)
	plain := c.others(leaders...)
	if len(plain) != 1 || len(leaders) < 2 {
		t.Fatalf("leaders %v of 4 nodes", leaders)
	}
	frontend := c.nodes[plain[0]]
	var readers []*proc
	for range 3 {
		// Tries, as a frontend's page views are: granted on the agent's
		// shared read ticket.
		r := start(t, "lock", "/site", "--mode", "read-only", "--try", "--api", frontend.sock, "--",
			"sh", "-c", "echo reading; exec sleep 60")
		r.waitLine(t, "reading")
		readers = append(readers, r)
	}
	code, out, errs := sluice(t, c.nodes[leaders[0]].sock, "locks", "/site")
	if code != 0 || !strings.Contains(out, "shared read ticket, readers on it: 3") || strings.Count(out, "/site") != 1 {
		t.Fatalf("locks on a leader while 3 readers hold node %d's shared read ticket: exit %d\n%s%s", plain[0]+1, code, out, errs)
	}
	t.Logf("sluice locks on node %d (a leader) while 3 readers hold node %d's shared read ticket:\n%s", leaders[0]+1, plain[0]+1, out)

	drain := start(t, "drain", "/site", "--api", c.nodes[leaders[1]].sock, "--", "echo", "maintenance runs")
	drain.waitLine(t, "3 readers left")
	for i, r := range readers {
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		r.wait(t)
		if left := len(readers) - 1 - i; left > 0 {
			drain.waitLine(t, fmt.Sprintf("%d readers left", left))
		}
	}
	drain.waitLine(t, "maintenance runs")
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain exited %d", code)
	}
}

// waitLocalTicket waits until the agent's own table (a leader's replica
// table, ?local=true) lists name's request with its number, not choosing.
func waitLocalTicket(t *testing.T, sock, name string) {
	t.Helper()
	hc := unixClient(sock)
	deadline := time.Now().Add(bound)
	for {
		var tab api.Table
		resp, err := hc.Get("http://sluice/v1/locks?local=true&prefix=" + url.QueryEscape(name))
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&tab)
			resp.Body.Close()
		}
		numbered := err == nil && len(tab.Locks) == 1 && len(tab.Locks[0].Entries) > 0 &&
			!slices.ContainsFunc(tab.Locks[0].Entries, func(e api.Entry) bool { return e.Ticket == 0 })
		if numbered {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader's own table of %s after %v: %+v (%v)", name, bound, tab.Locks, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the leader's table for EXITING's effect, bounded
	}
}

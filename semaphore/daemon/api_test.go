package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// apiAgent is a one-node agent with Badger in memory, serving the API on a
// Unix socket in a short temporary path (socket paths are limited to ~100
// bytes).
func apiAgent(t *testing.T, addr, token string, roles ...string) (*daemon.Agent, *http.Client, string) {
	t.Helper()
	if addr == "" {
		dir, err := os.MkdirTemp("", "sl")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		addr = filepath.Join(dir, "api.sock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	a, err := daemon.StartAgent(ctx, daemon.AgentConfig{Name: "solo", InMemory: true,
		Listen: []string{"/ip4/127.0.0.1/tcp/0"}, API: addr, APIToken: token, Roles: roles})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	tr := &http.Transport{}
	base := "http://" + a.APIAddr()
	if !api.IsTCPAddr(addr) {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a.APIAddr())
		}
		base = "http://sluice"
	}
	client := &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	c := &cluster{t: t, agents: []*daemon.Agent{a}}
	c.waitReady()
	return a, client, base
}

type answer struct {
	status int
	body   map[string]any
	raw    string
}

func call(t *testing.T, c *http.Client, method, url, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func TestAPILockCycle(t *testing.T) {
	_, c, base := apiAgent(t, "", "")
	got := call(t, c, "POST", base+"/v1/acquire", `{"name":"/site","mode":"read-write-priority","duration":"1m"}`)
	if got.status != 200 || got.body["lease"] == nil || got.body["token"].(float64) < 1 {
		t.Fatalf("acquire: %d %s", got.status, got.raw)
	}
	lease := got.body["lease"].(string)
	// The TTL counts from the call: at most the duration plus the wait, and
	// the same in milliseconds.
	ttl, err := time.ParseDuration(fmt.Sprint(got.body["ttl"]))
	if err != nil || ttl <= 0 || ttl > time.Minute+time.Second || int64(got.body["ttl_ms"].(float64)) != ttl.Milliseconds() {
		t.Fatalf("acquire's ttl %v (%v), ttl_ms %v: %s", got.body["ttl"], err, got.body["ttl_ms"], got.raw)
	}
	// A writer's try on the held name: 409 timedout; a reader's: 503
	// draining, the frontend's cue for the maintenance page.
	try := call(t, c, "POST", base+"/v1/acquire", `{"name":"/site","try":true}`)
	if try.status != 409 || try.body["error"] != "timedout" {
		t.Fatalf("try on a held name: %d %s", try.status, try.raw)
	}
	read := call(t, c, "POST", base+"/v1/acquire", `{"name":"/site","mode":"read-only","try":true}`)
	if read.status != 503 || read.body["error"] != "draining" {
		t.Fatalf("reader's try during a drain: %d %s", read.status, read.raw)
	}
	renew := call(t, c, "POST", base+"/v1/renew", fmt.Sprintf(`{"lease":%q}`, lease))
	if renew.status != 200 || renew.body["lease"] != lease {
		t.Fatalf("renew: %d %s", renew.status, renew.raw)
	}
	// A renewal lasts the duration from the renew call, not from its
	// confirmation: never more than the duration.
	if ttl, err := time.ParseDuration(fmt.Sprint(renew.body["ttl"])); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Fatalf("renew's ttl %v (%v): %s", renew.body["ttl"], err, renew.raw)
	}
	locks := call(t, c, "GET", base+"/v1/locks?prefix=/s", "")
	if locks.status != 200 || !strings.Contains(locks.raw, lease) {
		t.Fatalf("locks: %d %s", locks.status, locks.raw)
	}
	st := call(t, c, "GET", base+"/v1/status", "")
	if st.status != 200 || st.body["state"] != "LOCK_READY" || st.body["mesh"] == nil {
		t.Fatalf("status: %d %s", st.status, st.raw)
	}
	// A release naming another lock is not this lease's: refused, and
	// the lease holds on.
	other := call(t, c, "POST", base+"/v1/release", fmt.Sprintf(`{"lease":%q,"name":"/other"}`, lease))
	if other.status != 404 || other.body["error"] != "unknown_lease" {
		t.Fatalf("release naming another lock: %d %s", other.status, other.raw)
	}
	rel := call(t, c, "POST", base+"/v1/release", fmt.Sprintf(`{"lease":%q,"name":"/site"}`, lease))
	if rel.status != 200 {
		t.Fatalf("release: %d %s", rel.status, rel.raw)
	}
	// Answered once the leaders (here, the one) dropped it: it is gone
	// from the table already.
	if locks := call(t, c, "GET", base+"/v1/locks?prefix=/s", ""); locks.status != 200 || strings.Contains(locks.raw, lease) {
		t.Fatalf("locks after the release: %d %s", locks.status, locks.raw)
	}
	again := call(t, c, "POST", base+"/v1/release", fmt.Sprintf(`{"lease":%q}`, lease))
	if again.status != 404 || again.body["error"] != "unknown_lease" {
		t.Fatalf("second release: %d %s", again.status, again.raw)
	}
	if r := call(t, c, "POST", base+"/v1/renew", fmt.Sprintf(`{"lease":%q}`, lease)); r.status != 404 || r.body["error"] != "unknown_lease" {
		t.Fatalf("renew after the release: %d %s", r.status, r.raw)
	}
	next := call(t, c, "POST", base+"/v1/acquire", `{"name":"/site","try":true}`)
	if next.status != 200 || next.body["token"].(float64) <= got.body["token"].(float64) {
		t.Fatalf("acquire after release: %d %s", next.status, next.raw)
	}
}

// The client hanging up abandons its request: it leaves the table, and the
// name is free for others.
func TestAPIHangUpAbandons(t *testing.T) {
	a, c, base := apiAgent(t, "", "")
	held := call(t, c, "POST", base+"/v1/acquire", `{"name":"/x"}`)
	if held.status != 200 {
		t.Fatal(held.raw)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/acquire", strings.NewReader(`{"name":"/x","timeout":"10m"}`))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	cl := &cluster{t: t, agents: []*daemon.Agent{a}}
	count := func() int {
		tab, err := a.Node().Locks(context.Background(), "/x")
		if err != nil {
			t.Fatal(err)
		}
		return len(tab.Requests)
	}
	cl.waitFor("the second request queued", func() bool { return count() == 2 })
	cancel()
	<-done
	cl.waitFor("the abandoned request gone", func() bool { return count() == 1 })
}

func TestAPIWatch(t *testing.T) {
	_, c, base := apiAgent(t, "", "")
	got := call(t, c, "POST", base+"/v1/acquire", `{"name":"/w","duration":"1m"}`)
	lease := got.body["lease"].(string)
	resp, err := c.Get(base + "/v1/watch?lease=" + lease)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || !strings.Contains(lines.Text(), `"event":"granted"`) {
		t.Fatalf("first watch event: %q", lines.Text())
	}
	if r := call(t, c, "POST", base+"/v1/release", fmt.Sprintf(`{"lease":%q}`, lease)); r.status != 200 {
		t.Fatal(r.raw)
	}
	if !lines.Scan() || !strings.Contains(lines.Text(), `"event":"unlocked"`) {
		t.Fatalf("watch event after release: %q", lines.Text())
	}
	if lines.Scan() {
		t.Fatalf("watch went on after the lease ended: %q", lines.Text())
	}
}

// TestAPIPageViews: a client that lends a reader's lease to its
// process's page views says how many run on it; the table shows it on the
// request and counts them as the share's readers (at least the lease
// itself), which is what a drain waits for. Only a reader's lease of the
// caller carries them.
func TestAPIPageViews(t *testing.T) {
	_, c, base := apiAgent(t, "", "")
	got := call(t, c, "POST", base+"/v1/acquire", `{"name":"/pv","mode":"read-only","duration":"1m"}`)
	if got.status != 200 {
		t.Fatalf("acquire: %d %s", got.status, got.raw)
	}
	lease := got.body["lease"].(string)
	// The agent's own table (local) counts its shared readers; the
	// cluster's puts them on its shared read ticket's entry, where a
	// drain counts them.
	table := func() api.Table {
		t.Helper()
		var merged, local api.Table
		r := call(t, c, "GET", base+"/v1/locks?prefix=/pv", "")
		if r.status != 200 || json.Unmarshal([]byte(r.raw), &merged) != nil || len(merged.Locks) != 1 {
			t.Fatalf("locks: %d %s", r.status, r.raw)
		}
		r = call(t, c, "GET", base+"/v1/locks?prefix=/pv&local=true", "")
		if r.status != 200 || json.Unmarshal([]byte(r.raw), &local) != nil || len(local.Requests) != 1 {
			t.Fatalf("local locks: %d %s", r.status, r.raw)
		}
		if drain, own := merged.Locks[0].ReadersHolding(), local.SharedReaders["/pv"]; drain != own {
			t.Fatalf("readers: %d in the cluster's table, %d in the agent's", drain, own)
		}
		return local
	}
	if tab := table(); tab.SharedReaders["/pv"] != 1 || tab.Requests[0].PageViews != nil || tab.Requests[0].Phase != "held-shared" {
		t.Fatalf("before any word: %+v", tab)
	}
	say := func(body string) answer {
		t.Helper()
		return call(t, c, "POST", base+"/v1/page-views", body)
	}
	if r := say(fmt.Sprintf(`{"lease":%q,"name":"/pv","in_flight":7}`, lease)); r.status != 200 || r.body["in_flight"] != 7.0 {
		t.Fatalf("page views 7: %d %s", r.status, r.raw)
	}
	metric := func() string {
		t.Helper()
		r := call(t, c, "GET", base+"/metrics", "")
		for line := range strings.Lines(r.raw) {
			if strings.HasPrefix(line, "sluice_lent_page_views ") {
				return strings.TrimSpace(line)
			}
		}
		t.Fatalf("no sluice_lent_page_views in /metrics: %d", r.status)
		return ""
	}
	if m := metric(); m != "sluice_lent_page_views 7" {
		t.Fatalf("metric after 7 page views: %s", m)
	}
	tab := table()
	if tab.SharedReaders["/pv"] != 7 || tab.Requests[0].PageViews == nil || *tab.Requests[0].PageViews != 7 || tab.Requests[0].PageViewsAt.IsZero() {
		t.Fatalf("after 7 page views: shared readers %v, request %+v", tab.SharedReaders, tab.Requests[0])
	}
	// None at the moment: the lease still holds, one reader.
	if r := say(fmt.Sprintf(`{"lease":%q,"in_flight":0}`, lease)); r.status != 200 {
		t.Fatalf("page views 0: %d %s", r.status, r.raw)
	}
	if tab := table(); tab.SharedReaders["/pv"] != 1 || *tab.Requests[0].PageViews != 0 {
		t.Fatalf("after 0 page views: shared readers %v, request %+v", tab.SharedReaders, tab.Requests[0])
	}
	if r := say(fmt.Sprintf(`{"lease":%q,"name":"/other","in_flight":2}`, lease)); r.status != 404 || r.body["error"] != "unknown_lease" {
		t.Fatalf("page views on another name: %d %s", r.status, r.raw)
	}
	w := call(t, c, "POST", base+"/v1/acquire", `{"name":"/pw","mode":"exclusive","duration":"1m"}`)
	if r := say(fmt.Sprintf(`{"lease":%q,"in_flight":2}`, w.body["lease"])); r.status != 400 || r.body["error"] != "invalid" {
		t.Fatalf("page views on a writer's lease: %d %s", r.status, r.raw)
	}
	if r := call(t, c, "POST", base+"/v1/release", fmt.Sprintf(`{"lease":%q}`, lease)); r.status != 200 {
		t.Fatal(r.raw)
	}
	if r := say(fmt.Sprintf(`{"lease":%q,"in_flight":2}`, lease)); r.status != 404 {
		t.Fatalf("page views on a released lease: %d %s", r.status, r.raw)
	}
	if r := say(fmt.Sprintf(`{"lease":%q,"in_flight":4}`, w.body["lease"])); r.status != 400 {
		t.Fatalf("page views on a writer's lease: %d %s", r.status, r.raw)
	}
	if m := metric(); m != "sluice_lent_page_views 0" {
		t.Fatalf("metric once the lease was released: %s", m)
	}
}

func TestAPIForceUnlock(t *testing.T) {
	_, c, base := apiAgent(t, "", "")
	got := call(t, c, "POST", base+"/v1/acquire", `{"name":"/f","duration":"10m"}`)
	token := got.body["token"].(float64)
	f := call(t, c, "POST", base+"/v1/force-unlock", fmt.Sprintf(`{"name":"/f","token":%d}`, int(token)))
	if f.status != 200 || !strings.Contains(f.raw, got.body["lease"].(string)) {
		t.Fatalf("force-unlock: %d %s", f.status, f.raw)
	}
	next := call(t, c, "POST", base+"/v1/acquire", `{"name":"/f","timeout":"20s"}`)
	if next.status != 200 || next.body["token"].(float64) <= token {
		t.Fatalf("acquire after force-unlock: %d %s", next.status, next.raw)
	}
	if r := call(t, c, "POST", base+"/v1/force-unlock", `{"name":"/f","token":999}`); r.status != 404 {
		t.Fatalf("force-unlock of an unknown token: %d %s", r.status, r.raw)
	}
}

func TestAPIBadInput(t *testing.T) {
	_, c, base := apiAgent(t, "", "")
	long := strings.Repeat("n", 1025)
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/acquire", `{"name":`, 400, "bad_request"},
		{"POST", "/v1/acquire", `not json`, 400, "bad_request"},
		{"POST", "/v1/acquire", `{"name":"/a","colour":"red"}`, 400, "bad_request"},
		{"POST", "/v1/acquire", `{"name":"/a"} {"name":"/b"}`, 400, "bad_request"},
		{"POST", "/v1/acquire", `{"name":""}`, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"` + long + `"}`, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"/a","mode":"sideways"}`, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"/a","timeout":"-1s"}`, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"/a","duration":"0s"}`, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"/a","duration":"100000h"}`, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"/a","duration":"soon"}`, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"/a","limit":-3}`, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"` + strings.Repeat("x", 70000) + `"}`, 413, "bad_request"},
		{"POST", "/v1/release", `{"lease":"1.2"}`, 400, "invalid"},
		{"POST", "/v1/release", `{"lease":"x.y.z"}`, 400, "invalid"},
		{"POST", "/v1/release", `{"lease":"0.1.1"}`, 400, "invalid"},
		{"POST", "/v1/release", `{"lease":"7.1.1"}`, 404, "unknown_lease"},
		{"POST", "/v1/renew", `{"lease":"7.1.1"}`, 404, "unknown_lease"},
		{"POST", "/v1/page-views", `{"lease":"7.1.1","in_flight":3}`, 404, "unknown_lease"},
		{"POST", "/v1/page-views", `{"lease":"7.1.1","in_flight":-1}`, 400, "invalid"},
		{"POST", "/v1/page-views", `{"lease":"7.1.1","in_flight":1048577}`, 400, "invalid"},
		{"POST", "/v1/page-views", `{"lease":"7.1.1","in_flight":"many"}`, 400, "bad_request"},
		{"POST", "/v1/page-views", `{"lease":"7.1.1","views":3}`, 400, "bad_request"},
		{"GET", "/v1/watch?lease=7.1.1", ``, 404, "unknown_lease"},
		{"POST", "/v1/force-unlock", `{"name":"/a"}`, 400, "invalid"},
		{"POST", "/v1/force-unlock", `{"name":"","token":3}`, 400, "invalid"},
		{"POST", "/v1/force-unlock", `{"name":"/a","lease":"7.1.1"}`, 404, "unknown_lease"},
		{"POST", "/v1/members/vouch", `{"really":true}`, 400, "bad_request"},
		{"POST", "/v1/members/vouch", `{}`, 409, "conflict"}, // a single-node agent checked in at start
		{"GET", "/v1/members/vouch", ``, 405, "bad_request"},
		{"GET", "/v1/acquire", ``, 405, "bad_request"},
		{"DELETE", "/v1/status", ``, 405, "bad_request"},
		{"GET", "/v2/nothing", ``, 404, "bad_request"},
	} {
		t.Run(tc.method+" "+tc.path+" "+tc.body[:min(len(tc.body), 40)], func(t *testing.T) {
			got := call(t, c, tc.method, base+tc.path, tc.body)
			if got.status != tc.status || tc.code != "" && got.body["error"] != tc.code {
				t.Fatalf("got %d %s, want %d %s", got.status, got.raw, tc.status, tc.code)
			}
			if tc.code != "" && got.body["message"] == "" {
				t.Fatalf("no message: %s", got.raw)
			}
		})
	}
	// Nothing was lost: the node still grants.
	if got := call(t, c, "POST", base+"/v1/acquire", `{"name":"/a","try":true}`); got.status != 200 {
		t.Fatalf("acquire after bad input: %d %s", got.status, got.raw)
	}
}

func TestAPITokenOnTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, c, base := apiAgent(t, addr, "s3cret")
	if got := call(t, c, "GET", base+"/v1/status", ""); got.status != 401 || got.body["error"] != "unauthorized" {
		t.Fatalf("no token: %d %s", got.status, got.raw)
	}
	if got := call(t, c, "GET", base+"/v1/status", "", "Authorization", "Bearer wrong"); got.status != 401 {
		t.Fatalf("wrong token: %d %s", got.status, got.raw)
	}
	if got := call(t, c, "GET", base+"/v1/status", "", "Authorization", "Bearer s3cret"); got.status != 200 {
		t.Fatalf("right token: %d %s", got.status, got.raw)
	}
}

func TestListenAPIRefuses(t *testing.T) {
	for _, tc := range []struct{ addr, token string }{
		{"127.0.0.1:0", ""},         // TCP without a token
		{"10.0.0.1:7000", "secret"}, // not loopback
		{"[::1]:99999", "x"},
	} {
		if l, _, err := daemon.ListenAPI(tc.addr, tc.token); err == nil {
			l.Close()
			t.Errorf("ListenAPI(%q, %q) listened", tc.addr, tc.token)
		}
	}
	// A live socket is not taken over; a stale one is.
	dir, _ := os.MkdirTemp("", "sl")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.sock")
	l, _, err := daemon.ListenAPI(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if l2, _, err := daemon.ListenAPI(path, ""); err == nil {
		l2.Close()
		t.Fatal("a second listener took a live socket over")
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l3, _, err := daemon.ListenAPI(path, "")
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l3.Close()
}

// /metrics: Prometheus text with the grants, failures, waits, holds, active
// leases and waiters, phases, views, and the mesh's and store's series.
func TestAPIMetrics(t *testing.T) {
	_, c, base := apiAgent(t, "", "")
	got := call(t, c, "POST", base+"/v1/acquire", `{"name":"/m","mode":"read-write-priority"}`)
	if got.status != 200 {
		t.Fatal(got.raw)
	}
	call(t, c, "POST", base+"/v1/acquire", `{"name":"/m","try":true}`)
	call(t, c, "POST", base+"/v1/acquire", `{"name":"/m","mode":"read-only","try":true}`)
	call(t, c, "POST", base+"/v1/release", fmt.Sprintf(`{"lease":%q}`, got.body["lease"]))
	m := call(t, c, "GET", base+"/metrics", "")
	if m.status != 200 {
		t.Fatalf("metrics: %d", m.status)
	}
	for _, want := range []string{
		`sluice_grants_total{mode="read-write-priority"} 1`,
		`sluice_failures_total{reason="timedout"} 1`,
		`sluice_failures_total{reason="draining"} 1`,
		`sluice_wait_seconds_count{mode="read-write-priority"} 1`,
		`sluice_hold_seconds_count{mode="read-write-priority"} 1`,
		`sluice_active_leases{mode="read-write-priority"} 0`,
		"sluice_waiters 0",
		"sluice_lent_page_views 0",
		`sluice_bakery_phase_seconds_count{phase="add-ticket"}`,
		"sluice_views_total 1",
		"sluice_leader_changes_total 1",
		"sluice_peers_known 0",
		"sluice_mesh_writes_total 0",
		"sluice_store_syncs_total",
		"sluice_store_commit_seconds_count",
		"go_goroutines",
		// Worth alerting on: the node's state, its build, its process.
		"sluice_ready 1",
		"sluice_leader 1",
		"sluice_epoch 1",
		"sluice_members 1",
		"sluice_members_reachable 1",
		`sluice_build_info{goversion="go`,
		"process_cpu_seconds_total",
		"process_resident_memory_bytes",
		// Labels at zero before anything happened to them.
		`sluice_grants_total{mode="read-write-gentle"} 0`,
		`sluice_failures_total{reason="overflow"} 0`,
		`sluice_wait_seconds_bucket{mode="read-only",le="5e-05"} 0`,
		`sluice_messages_total{direction="in"}`,
		`sluice_peer_messages_total{kind="report"} 0`,
		"sluice_one_round_doorways_total",
		"sluice_share_bypasses_total 0",
		"sluice_messages_dropped_total 0",
	} {
		if !strings.Contains(m.raw, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestValidate: the edge's one check refuses each rule broken, with the
// field in its message, and lets the limits themselves through.
func TestValidate(t *testing.T) {
	ok := daemon.Request{Name: "/a", Mode: semaphore.ReadOnly, Timeout: time.Second, Duration: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		edit func(*daemon.Request)
		want string
	}{
		"empty name":       {func(r *daemon.Request) { r.Name = "" }, "empty name"},
		"long name":        {func(r *daemon.Request) { r.Name = strings.Repeat("n", wire.MaxNameLen+1) }, "name of"},
		"unknown mode":     {func(r *daemon.Request) { r.Mode = 77 }, "mode"},
		"negative timeout": {func(r *daemon.Request) { r.Timeout = -time.Second }, "timeout"},
		"zero duration":    {func(r *daemon.Request) { r.Duration = 0 }, "under 10ms"},
		"1ns duration":     {func(r *daemon.Request) { r.Duration = time.Nanosecond }, "under 10ms"},
		"newline in name":  {func(r *daemon.Request) { r.Name = "/a\n/b holder" }, "control character"},
		"escape in name":   {func(r *daemon.Request) { r.Name = "/a\x1b[2J" }, "control character"},
		"C1 in name":       {func(r *daemon.Request) { r.Name = "/a\u0085" }, "control character"},
		"bad UTF-8 name":   {func(r *daemon.Request) { r.Name = "/a\xff" }, "UTF-8"},
		"absurd duration":  {func(r *daemon.Request) { r.Duration = 100000 * time.Hour }, "duration"},
		"negative grace":   {func(r *daemon.Request) { r.Grace = -1 }, "grace"},
		"negative quiet":   {func(r *daemon.Request) { r.Quiet = -1 }, "quiet"},
		"negative limit":   {func(r *daemon.Request) { r.Limit = -2 }, "reader limit"},
		"absurd limit":     {func(r *daemon.Request) { r.Limit = core.DefaultMaxWaiters + 1 }, "reader limit"},
		"long reason":      {func(r *daemon.Request) { r.Mode, r.Reason = semaphore.ReadWritePriority, strings.Repeat("r", 10<<20) }, "reason"},
		"reason with tab":  {func(r *daemon.Request) { r.Mode, r.Reason = semaphore.ReadWritePriority, "a\tb" }, "reason"},
		"preview not hex":  {func(r *daemon.Request) { r.Mode, r.Preview = semaphore.ReadWritePriority, strings.Repeat("g", 64) }, "preview"},
		"preview a token":  {func(r *daemon.Request) { r.Mode, r.Preview = semaphore.ReadWritePriority, "secret" }, "preview"},
		"reader previews":  {func(r *daemon.Request) { r.Preview = strings.Repeat("a", 64) }, "writer's"},
		"reader's grace":   {func(r *daemon.Request) { r.ReadersGrace = time.Second }, "writer's"},
		"negative r-grace": {func(r *daemon.Request) { r.Mode, r.ReadersGrace = semaphore.ReadWrite, -1 }, "readers_grace"},
	} {
		r := ok
		tc.edit(&r)
		if err := r.Validate(); !errors.Is(err, codes.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, tc.want)
		}
	}
	for _, edit := range []func(*daemon.Request){
		func(r *daemon.Request) { r.Limit, r.Quiet = 3, 5*time.Second },
		func(r *daemon.Request) { r.Limit = core.DefaultMaxWaiters },
		func(r *daemon.Request) { r.Timeout, r.Try = 0, true },
		func(r *daemon.Request) { r.Name = "/straße/ü page with spaces" },
		func(r *daemon.Request) { r.Duration = daemon.MinDuration },
		func(r *daemon.Request) {
			r.Mode, r.Preview, r.ReadersGrace = semaphore.ReadWritePriority, strings.Repeat("0f", 32), time.Second
		},
	} {
		r := ok
		edit(&r)
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

// TestParseAcquire: the body's defaults, and what only reading refuses.
func TestParseAcquire(t *testing.T) {
	r, err := daemon.ParseAcquire(api.AcquireBody{Name: "/a"})
	if err != nil || r.Mode != semaphore.Exclusive || r.Timeout != 30*time.Second || r.Duration != time.Minute || r.Validate() != nil {
		t.Fatalf("defaults: %+v %v", r, err)
	}
	for _, b := range []api.AcquireBody{{Name: "/a", Mode: "sideways"}, {Name: "/a", Quiet: "soon"}} {
		if _, err := daemon.ParseAcquire(b); !errors.Is(err, codes.ErrInvalid) {
			t.Errorf("%+v: %v", b, err)
		}
	}
}

// TestOpenAPI: the agent serves the document in the repo; every path and
// method it lists is an endpoint (not 404 or 405), and every request body
// lists exactly the fields the API decodes (it refuses unknown ones).
func TestOpenAPI(t *testing.T) {
	_, c, base := apiAgent(t, "", "")
	got := call(t, c, "GET", base+"/v1/openapi.json", "")
	if got.status != 200 || got.raw != string(api.OpenAPI) {
		t.Fatalf("GET /v1/openapi.json: %d", got.status)
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]map[string]struct {
			RequestBody *struct {
				Content map[string]struct {
					Schema struct {
						Properties map[string]any `json:"properties"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi.json: %v %q", err, doc.OpenAPI)
	}
	bodies := map[string]any{"/v1/acquire": api.AcquireBody{}, "/v1/release": api.LeaseBody{}, "/v1/renew": api.LeaseBody{}, "/v1/page-views": api.PageViewsBody{},
		"/v1/force-unlock": api.ForceBody{}, "/v1/members": api.MembersBody{}}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			// An empty body: a real endpoint answers anything but "no
			// endpoint" (404) or a wrong method (405).
			r := call(t, c, strings.ToUpper(method), base+path, "{}")
			if r.status == 405 || r.status == 404 && strings.Contains(r.raw, "no endpoint") {
				t.Errorf("%s %s: %d %s", method, path, r.status, r.raw)
			}
			if op.RequestBody == nil {
				continue
			}
			want := map[string]bool{}
			for _, f := range reflect.VisibleFields(reflect.TypeOf(bodies[path])) {
				want[strings.Split(f.Tag.Get("json"), ",")[0]] = true
			}
			props := op.RequestBody.Content["application/json"].Schema.Properties
			for name := range props {
				if !want[name] {
					t.Errorf("%s %s: the document lists %q, which the API refuses", method, path, name)
				}
			}
			for name := range want {
				if _, ok := props[name]; !ok {
					t.Errorf("%s %s: the document lacks %q", method, path, name)
				}
			}
		}
	}
}

// Durations come as Go duration strings or as numbers of milliseconds,
// what most languages' JSON has at hand; anything else is a clear 400.
func TestAPIDurationsAsMilliseconds(t *testing.T) {
	_, c, base := apiAgent(t, "", "")
	got := call(t, c, "POST", base+"/v1/acquire", `{"name":"/ms","timeout":5000,"duration":60000,"grace":0}`)
	if ms, _ := got.body["ttl_ms"].(float64); got.status != 200 || ms < 50000 || ms > 60000 {
		t.Fatalf("durations in milliseconds: %d %s", got.status, got.raw)
	}
	for _, body := range []string{`{"name":"/ms2","timeout":true}`, `{"name":"/ms2","duration":[1]}`,
		`{"name":"/ms2","duration":-5}`, `{"name":"/ms2","timeout":"5"}`} {
		if r := call(t, c, "POST", base+"/v1/acquire", body); r.status != 400 {
			t.Errorf("%s: %d %s, want 400", body, r.status, r.raw)
		}
	}
}

// An acquire of several names answers their leases in the order taken;
// bad lists are 400 invalid, and a list far too long too.
func TestAPIAcquireSeveral(t *testing.T) {
	_, c, base := apiAgent(t, "", "")
	got := call(t, c, "POST", base+"/v1/acquire", `{"names":["/b","/a"],"duration":"1m"}`)
	var set api.LeaseSet
	if got.status != 200 || json.Unmarshal([]byte(got.raw), &set) != nil || len(set.Leases) != 2 ||
		set.Leases[0].Name != "/a" || set.Leases[1].Name != "/b" || set.Leases[0].Token == 0 {
		t.Fatalf("acquire of two names: %d %s", got.status, got.raw)
	}
	huge := `{"names":["/n0"` + strings.Repeat(`,"/n"`, 10000) + `]}`
	for _, c2 := range []struct{ body, why string }{
		{`{"name":"/a","names":["/c"]}`, "name and names exclude each other"},
		{`{"names":[]}`, "no name"},
		{`{"names":["/c","/c"]}`, `"/c" twice`},
		{huge, "10001 names, at most 64"},
	} {
		bad := call(t, c, "POST", base+"/v1/acquire", c2.body)
		if bad.status != 400 || bad.body["error"] != "invalid" || !strings.Contains(fmt.Sprint(bad.body["message"]), c2.why) {
			t.Errorf("%.60s: %d %s, want 400 saying %q", c2.body, bad.status, bad.raw, c2.why)
		}
	}
}

// A lease id is exactly node.incarnation.counter, in decimal, with a
// node that is not 0 and incarnation and counter of 32 bits.
func TestParseLeaseID(t *testing.T) {
	good := map[string]wire.RequestID{
		"1.2.3":                             {Node: 1, Seq: 2<<32 | 3},
		"18446744073709551615.4294967295.0": {Node: 1<<64 - 1, Seq: (1<<32 - 1) << 32},
	}
	for s, want := range good {
		if got, err := daemon.ParseLeaseID(s); err != nil || got != want {
			t.Errorf("ParseLeaseID(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", ".", "..", "1.2", "1.2.3.4", "1..3", "1.2.", ".2.3", "0.2.3", "1.4294967296.3",
		"1.2.4294967296", "a.2.3", "1.-2.3", "1.2.3 ", "18446744073709551616.1.1"} {
		if got, err := daemon.ParseLeaseID(s); !errors.Is(err, semaphore.ErrInvalid) {
			t.Errorf("ParseLeaseID(%q) = %v, %v; want an invalid-input error", s, got, err)
		}
	}
}

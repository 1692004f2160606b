package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/sluicehq/sluice/p2p"
	"github.com/sluicehq/sluice/semaphore"
)

// TestFaultHostileInput: against the running
// cluster, with the workload on, a peer with the wrong secret, a
// non-member, a machine added with --initial-members instead of --join,
// garbage and oversized frames on the mesh port, malformed and oversized
// API requests, a TCP API request without its token, and 10,000 requests
// for one held name through one agent. Each gets its clear error; the
// checks of the workload's history then show that the cluster kept
// serving correctly.
func TestFaultHostileInput(t *testing.T) {
	r := newFaultRun(t, false)
	r.run(time.Second)
	r.wrongSecret()
	r.nonMember()
	r.garbageOnMeshPort()
	r.badFrames()
	r.badAPIRequests()
	r.manyWaiters(*waitersFlag)
	r.run(time.Second)
	r.finish()
}

var waitersFlag = flag.Int("waiters", 10000, "TestFaultHostileInput: requests for one held name through one agent")

// stranger starts a sixth agent with the cluster's peers and its own data
// directory; extra are its flags for membership and API.
func (r *faultRun) stranger(name, psk string, extra ...string) *proc {
	r.t.Helper()
	var peers []string
	for _, n := range r.c.nodes {
		peers = append(peers, n.addr())
	}
	data := filepath.Join(r.c.root, name)
	args := append([]string{"agent", "--name", name, "--data", data, "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", freePort(r.t)),
		"--peers", strings.Join(peers, ","), "--psk-file", psk, "--log-level", "warn"}, extra...)
	p := start(r.t, args...)
	p.waitLine(r.t, "API on")
	return p
}

// waitReason polls a status until its reason holds every one of want.
func waitReason(t *testing.T, c *http.Client, url string, hdr http.Header, want ...string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		st, err := getJSON(c, url, hdr)
		if err == nil {
			reason := fmt.Sprint(st["reason"])
			ok := st["state"] == "NO_LOCK"
			for _, w := range want {
				ok = ok && strings.Contains(reason, w)
			}
			if ok {
				return st
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status with %q after %v: %v %v", want, bound, st, err)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's state
	}
}

// postWith posts body to url with the header hdr.
func postWith(t *testing.T, c *http.Client, url string, hdr http.Header, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func getJSON(c *http.Client, url string, hdr http.Header) (map[string]any, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return nil, err
	}
	req.Header = hdr
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("%s: %w", resp.Status, err)
	}
	if resp.StatusCode != 200 {
		return out, fmt.Errorf("%s: %v", resp.Status, out)
	}
	return out, nil
}

// wrongSecret: a libp2p host with another secret cannot connect to an
// agent; an agent with another secret never joins, and its status and
// its refusals say why.
func (r *faultRun) wrongSecret() {
	t := r.t
	t.Helper()
	other := r.c.writeSecret("other.key")
	h := testHost(t, other)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := h.Connect(ctx, r.c.addrInfo(r.c.leaders(0)[0]))
	cancel()
	if err == nil {
		t.Fatal("a host with the wrong secret connected to a leader")
	}
	t.Logf("a host with the wrong secret, dialing a leader: %v", err)

	sock := filepath.Join(r.c.root, "wrong.sock")
	p := r.stranger("wrong", other, "--join", "--api", sock)
	c := unixClient(sock)
	st := waitReason(t, c, "http://sluice/v1/status", nil, "connected to none of the 5 peers known", "cluster secret")
	t.Logf("the agent with the wrong secret: %v: %v", st["state"], st["reason"])
	code, out := post(t, c, "/v1/acquire", `{"name":"/a","try":true}`)
	if code != 503 || out["error"] != "not_ready" || !strings.Contains(fmt.Sprint(out["message"]), "cluster secret") {
		t.Fatalf("acquire through the agent with the wrong secret: %d %v", code, out)
	}
	stopAgent(t, p)
	// The cluster never heard of it.
	_, members, _ := sluice(t, r.c.nodes[0].sock, "members", "--json")
	if id := peerID(t, filepath.Join(r.c.root, "wrong")); strings.Contains(members, id) {
		t.Fatalf("the cluster lists the agent with the wrong secret:\n%s", members)
	}
}

// nonMember: an agent with the secret that joins (--join) but was never
// added takes locks, as non-members may, and neither votes nor leads; its
// TCP API refuses a request without its token. A machine added with
// --initial-members naming itself instead of --join bootstraps another
// cluster: it serves nothing, and its status and refusals say why.
func (r *faultRun) nonMember() {
	t := r.t
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tokenFile := filepath.Join(r.c.root, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := r.stranger("joiner", r.c.psk, "--join", "--api", addr, "--api-token-file", tokenFile)
	c := &http.Client{Timeout: bound}
	base := "http://" + addr
	resp, err := c.Get(base + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(body), `"unauthorized"`) {
		t.Fatalf("a TCP API request without its token: %s %s", resp.Status, body)
	}
	t.Logf("a TCP API request without its token: %s %s", resp.Status, strings.TrimSpace(string(body)))
	auth := http.Header{"Authorization": {"Bearer s3cret-token"}}
	deadline := time.Now().Add(bound)
	for {
		st, err := getJSON(c, base+"/v1/status", auth)
		if err == nil && st["state"] == "LOCK_READY" {
			if st["leader"] == true {
				t.Fatalf("the non-member leads: %v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the non-member is not ready after %v: %v %v", bound, st, err)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's state
	}
	code, lease := postWith(t, c, base+"/v1/acquire", auth, `{"name":"/nm","try":true}`)
	if code != 200 {
		t.Fatalf("acquire through the non-member: %d %v", code, lease)
	}
	if code, out := postWith(t, c, base+"/v1/release", auth, fmt.Sprintf(`{"lease":%q}`, lease["lease"])); code != 200 {
		t.Fatalf("release through the non-member: %d %v", code, out)
	}
	id := peerID(t, filepath.Join(r.c.root, "joiner"))
	_, members, _ := sluice(t, r.c.nodes[0].sock, "members", "--json")
	var list struct {
		Members []struct {
			Peer  string `json:"peer"`
			Voter bool   `json:"voter"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(members), &list); err != nil {
		t.Fatalf("members --json: %v\n%s", err, members)
	}
	listed := false
	for _, m := range list.Members {
		if m.Peer == id {
			listed = true
			if m.Voter {
				t.Fatalf("the non-member votes:\n%s", members)
			}
		}
	}
	if !listed {
		t.Fatalf("the members do not list the non-member:\n%s", members)
	}
	t.Logf("the non-member: ready, took /nm, listed as a non-voter")
	stopAgent(t, p)

	var ids []string
	for _, n := range r.c.nodes {
		ids = append(ids, n.id)
	}
	data := filepath.Join(r.c.root, "misjoined")
	ids = append(ids, peerID(t, data))
	sock := filepath.Join(r.c.root, "misjoined.sock")
	p = r.stranger("misjoined", r.c.psk, "--initial-members", strings.Join(ids, ","), "--api", sock)
	uc := unixClient(sock)
	st := waitReason(t, uc, "http://sluice/v1/status", nil, "speaks for another cluster", "starts with --join, not --initial-members")
	t.Logf("a machine added with --initial-members: %v: %v", st["state"], st["reason"])
	code, out := post(t, uc, "/v1/acquire", `{"name":"/a","try":true}`)
	if code != 503 || out["error"] != "not_ready" || !strings.Contains(fmt.Sprint(out["message"]), "--join") {
		t.Fatalf("acquire through the misjoined agent: %d %v", code, out)
	}
	stopAgent(t, p)
}

// garbageOnMeshPort: raw bytes on an agent's TCP mesh port fail the
// handshake and the agent closes the connection.
func (r *faultRun) garbageOnMeshPort() {
	t := r.t
	t.Helper()
	n := r.c.nodes[r.c.leaders(0)[0]]
	hostPort := strings.Split(strings.TrimPrefix(n.listen, "/ip4/"), "/tcp/")
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(hostPort[0], hostPort[1]), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	junk := make([]byte, 64<<10)
	for i := range junk {
		junk[i] = byte(i*7 + 3)
	}
	_, _ = conn.Write(junk) // the agent may hang up before it all went
	_ = conn.SetReadDeadline(time.Now().Add(bound))
	buf := make([]byte, 4096)
	for {
		if _, err := conn.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the agent kept a connection of garbage open for %v", bound)
			}
			t.Logf("64 KiB of garbage on the mesh port: the agent hung up (%v)", err)
			return
		}
	}
}

// badFrames: a peer with the secret opens the lock protocol's stream to a
// leader and sends frames that are oversized or do not decode. The agent
// resets each stream and counts the frame.
func (r *faultRun) badFrames() {
	t := r.t
	t.Helper()
	li := r.c.leaders(0)[0]
	h := testHost(t, r.c.psk)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := h.Connect(ctx, r.c.addrInfo(li)); err != nil {
		t.Fatal(err)
	}
	uvarint := func(v uint64) []byte {
		var b []byte
		for v >= 0x80 {
			b = append(b, byte(v)|0x80)
			v >>= 7
		}
		return append(b, byte(v))
	}
	for _, tc := range []struct {
		name   string
		junk   []byte
		reason string
	}{
		{"a length of 1 GiB", uvarint(1 << 30), "oversized"},
		{"a ten-byte varint", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "oversized"},
		{"a padded varint", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, "malformed"},
		{"a body of garbage", append(uvarint(64), make([]byte, 64)...), "malformed"},
		{"an empty body", uvarint(0), "malformed"},
	} {
		before := rejectedFrames(t, r.c.nodes[li], tc.reason)
		s, err := h.NewStream(ctx, r.c.peer(li), p2p.LockProtocol)
		if err != nil {
			t.Fatalf("%s: open the lock stream: %v", tc.name, err)
		}
		if _, err := s.Write(tc.junk); err != nil {
			t.Fatalf("%s: write: %v", tc.name, err)
		}
		_ = s.SetReadDeadline(time.Now().Add(bound))
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, network.ErrReset) {
			t.Fatalf("%s: the agent did not reset the stream: %v", tc.name, err)
		}
		_ = s.Reset()
		if after := rejectedFrames(t, r.c.nodes[li], tc.reason); after != before+1 {
			t.Fatalf("%s: sluice_mesh_frames_rejected_total{reason=%q} went from %d to %d", tc.name, tc.reason, before, after)
		}
		t.Logf("%s on the lock stream: reset, counted as %s", tc.name, tc.reason)
	}
}

// rejectedFrames reads an agent's count of refused frames for reason.
func rejectedFrames(t *testing.T, n *faultNode, reason string) int {
	t.Helper()
	v, err := metric(n, fmt.Sprintf("sluice_mesh_frames_rejected_total{reason=%q}", reason))
	if err != nil {
		t.Fatal(err)
	}
	return int(v)
}

// metric reads one series of an agent's metrics.
func metric(n *faultNode, series string) (float64, error) {
	resp, err := n.c.Get("http://sluice/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s in the metrics", series)
}

// badAPIRequests: malformed and oversized requests get a 4xx with a code
// and a message.
func (r *faultRun) badAPIRequests() {
	t := r.t
	t.Helper()
	c := r.c.nodes[0].c
	for _, tc := range []struct {
		method, path, body string
		header             map[string]string
		status             int
		code               string
	}{
		{"POST", "/v1/acquire", `{"name":`, nil, 400, "bad_request"},
		{"POST", "/v1/acquire", `{"name":"/a","colour":"red"}`, nil, 400, "bad_request"},
		{"POST", "/v1/acquire", `{"name":"/a","mode":"sideways"}`, nil, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"/a","duration":"100000h"}`, nil, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"` + strings.Repeat("n", 1025) + `"}`, nil, 400, "invalid"},
		{"POST", "/v1/acquire", `{"name":"` + strings.Repeat("x", 1<<20) + `"}`, nil, 413, "bad_request"},
		{"POST", "/v1/release", `{"lease":"x.y.z"}`, nil, 400, "invalid"},
		{"POST", "/v1/renew", `{"lease":"7.1.1"}`, nil, 404, "unknown_lease"},
		{"POST", "/v1/force-unlock", `{"name":"/a"}`, nil, 400, "invalid"},
		{"GET", "/v1/acquire", ``, nil, 405, "bad_request"},
		{"GET", "/v2/nothing", ``, nil, 404, "bad_request"},
		{"GET", "/v1/status", ``, map[string]string{"X-Junk": strings.Repeat("h", 2<<20)}, 431, ""},
	} {
		req, err := http.NewRequest(tc.method, "http://sluice"+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		what := fmt.Sprintf("%s %s %.40s", tc.method, tc.path, tc.body)
		if resp.StatusCode != tc.status || tc.code != "" && (out["error"] != tc.code || out["message"] == "") {
			t.Fatalf("%s: %s %s; want %d %s with a message", what, resp.Status, raw, tc.status, tc.code)
		}
		t.Logf("%s: %s %.120s", what, resp.Status, strings.TrimSpace(string(raw)))
	}
}

// manyWaiters: a lock held on /w, then n requests for it at once through
// one agent. The agent never holds more than its cap of requests on one
// name (core.Config.MaxWaiters, 1000 by default, the holder's included)
// and answers every other one at once with `overflow` (429); its memory
// stays bounded, and its loop keeps up with its leaders (a `not_ready`
// answer would mean that the waiters' load made it miss their hellos).
// The waiters hang up, the holder releases, and /w is free.
func (r *faultRun) manyWaiters(n int) {
	t := r.t
	t.Helper()
	const maxWaiters = 1000
	node := r.c.nodes[0]
	pid := node.p.cmd.Process.Pid
	rssBefore := procStatusKiB(t, pid, "VmRSS")
	began := time.Now()
	code, held := post(t, node.c, "/v1/acquire", `{"name":"/w","duration":"10m"}`)
	if code != 200 {
		t.Fatalf("acquire /w: %d %v", code, held)
	}
	// One connection per waiting request; the cap on requests in flight
	// keeps the test's own connections under the socket's backlog.
	tr := &http.Transport{MaxIdleConnsPerHost: 256, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", node.sock)
	}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var overflow, other, answered atomic.Int64
	var firstOther atomic.Value
	inFlight := make(chan struct{}, 1500)
	var wg sync.WaitGroup
	body := fmt.Sprintf(`{"name":"/w","mode":%q,"timeout":"10m"}`, semaphore.Exclusive.String())
	mostHeld := 0
	watch := func() { // the agent's own count of requests on /w, at its worst
		if w, err := ownRequests(node, "/w"); err == nil {
			mostHeld = max(mostHeld, w)
		}
	}
	for i := range n {
		if i%500 == 0 {
			watch()
		}
		inFlight <- struct{}{}
		wg.Go(func() {
			defer func() { <-inFlight }()
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://sluice/v1/acquire", strings.NewReader(body))
			resp, err := c.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					other.Add(1)
					firstOther.CompareAndSwap(nil, err.Error())
				}
				return
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answered.Add(1)
			switch {
			case resp.StatusCode == 429 && strings.Contains(string(raw), `"overflow"`):
				overflow.Add(1)
			default:
				other.Add(1)
				firstOther.CompareAndSwap(nil, fmt.Sprintf("%s %s", resp.Status, raw))
			}
		})
	}
	// All but the cap are answered: the rest wait. The wait fails when
	// answers stop coming for bound, not after a fixed time: a loaded
	// machine may take its time.
	last, progress := int64(-1), time.Now()
	for a := answered.Load(); a < int64(n-maxWaiters) && other.Load() == 0; a = answered.Load() {
		if a > last {
			last, progress = a, time.Now()
		}
		if time.Since(progress) > bound {
			t.Fatalf("no answer for %v: %d of %d requests answered", bound, a, n)
		}
		watch()
		time.Sleep(200 * time.Millisecond) // polling the test's own counters
	}
	watch()
	if other.Load() > 0 {
		t.Fatalf("%d requests for /w got neither a place nor `overflow`; the first: %v", other.Load(), firstOther.Load())
	}
	took := time.Since(began)
	heap, _ := metric(node, "go_memstats_heap_inuse_bytes")
	goroutines, _ := metric(node, "go_goroutines")
	peak := procStatusKiB(t, pid, "VmHWM")
	t.Logf("%d requests for a held name through one agent: in %v, %d answered `overflow` (429), %d waiting; "+
		"the agent held at most %d requests on the name; its memory %d MiB before, peak %d MiB, heap in use %.0f MiB, %v goroutines",
		n, took.Round(time.Millisecond), overflow.Load(), n-int(answered.Load()), mostHeld,
		rssBefore>>10, peak>>10, heap/(1<<20), goroutines)
	if mostHeld > maxWaiters || overflow.Load() == 0 {
		t.Fatalf("the agent held %d requests on /w and answered %d `overflow`: its cap on waiters did not hold", mostHeld, overflow.Load())
	}
	// Bounded by the cap: 10,000 requests take an agent about 110 MiB
	// (their connections, goroutines and buffers, and 1,000 waiters whose
	// reports are merged once per batch); a cap that stops holding, or
	// decisions that copy the table per waiter again, go past the bound.
	if grown := peak - rssBefore; grown > 512<<10 {
		t.Fatalf("the agent's memory grew by %d MiB under %d waiters", grown>>10, n)
	}
	// The waiters hang up; their requests go.
	cancel()
	wg.Wait()
	lastW, progress := -1, time.Now()
	for {
		w, err := ownRequests(node, "/w")
		if err == nil && w <= 1 { // the holder's
			break
		}
		if err == nil && (lastW < 0 || w < lastW) {
			lastW, progress = w, time.Now()
		}
		if time.Since(progress) > bound {
			t.Fatalf("%d requests for /w still at the agent, none gone for %v, after their clients hung up: %v", lastW, bound, err)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's state
	}
	if code, out := post(t, node.c, "/v1/release", fmt.Sprintf(`{"lease":%q}`, held["lease"])); code != 200 {
		t.Fatalf("release /w: %d %v", code, out)
	}
	// The abandoned requests leave the leaders' tables (each a release
	// the leaders acknowledge) before the name takes new ones.
	progress = time.Now()
	for {
		code, out := post(t, node.c, "/v1/acquire", `{"name":"/w","try":true}`)
		if code == 200 {
			if code, out := post(t, node.c, "/v1/release", fmt.Sprintf(`{"lease":%q}`, out["lease"])); code != 200 {
				t.Fatalf("release /w: %d %v", code, out)
			}
			break
		}
		if code != 429 || time.Since(progress) > bound {
			t.Fatalf("a try for /w after the waiters hung up: %d %v", code, out)
		}
		time.Sleep(200 * time.Millisecond) // polling another process's state
	}
	probeNames(t, r.c, []string{"/w"})
}

// ownRequests counts the requests for name of n's clients, granted or
// waiting.
func ownRequests(n *faultNode, name string) (int, error) {
	resp, err := n.c.Get("http://sluice/v1/locks?prefix=" + name)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var table struct {
		Requests []struct {
			Name string `json:"name"`
		} `json:"requests"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		return 0, err
	}
	count := 0
	for _, r := range table.Requests {
		if r.Name == name {
			count++
		}
	}
	return count, nil
}

// procStatusKiB reads a field of /proc/PID/status, in KiB.
func procStatusKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kib
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// testHost is a libp2p host in the test process with the cluster secret
// of pskFile, on TCP like the agents, listening nowhere.
func testHost(t *testing.T, pskFile string) host.Host {
	t.Helper()
	psk, err := p2p.ReadPSK(pskFile)
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.NoListenAddrs, libp2p.Transport(tcp.NewTCPTransport), libp2p.PrivateNetwork(psk),
		libp2p.DisableRelay(), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// addrInfo is node i's mesh address.
func (c *faultCluster) addrInfo(i int) peer.AddrInfo {
	c.t.Helper()
	ai, err := peer.AddrInfoFromP2pAddr(ma.StringCast(c.nodes[i].addr()))
	if err != nil {
		c.t.Fatal(err)
	}
	return *ai
}

// peer is node i's peer id.
func (c *faultCluster) peer(i int) peer.ID { return c.addrInfo(i).ID }

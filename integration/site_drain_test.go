package integration

import (
	"bufio"
	"context"
	endian "encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/client"
)

// servedLog notes when a site's handlers made each answer, by the
// request id its visitor sent, in Unix nanoseconds.
type servedLog struct {
	mu     sync.Mutex
	byID   map[string]served
	nextID atomic.Int64
}

type served struct {
	start, end int64
	preview    bool
}

func (s *servedLog) note(id string, start int64, preview bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != "" {
		s.byID[id] = served{start, time.Now().UnixNano(), preview}
	}
}

func (s *servedLog) get(id string) (served, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.byID[id]
	return v, ok
}

// siteContent is what the site's pages say; the maintenance page never does.
const siteContent = "site content"

// recordingSite is a site's handler: /page answers at once, /slow?ms=N
// after N ms, /stream ticks until its request ends, /ws sends a websocket
// text frame every 100 ms until its connection ends. Each notes when it
// ran, under the visitor's X-Req-Id.
func recordingSite(log *servedLog) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		start := time.Now().UnixNano()
		fmt.Fprintln(w, siteContent)
		log.note(r.Header.Get("X-Req-Id"), start, r.Header.Get(client.PreviewHeader) != "")
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		start := time.Now().UnixNano()
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return // cut: no answer
		}
		fmt.Fprintln(w, siteContent)
		log.note(r.Header.Get("X-Req-Id"), start, r.Header.Get(client.PreviewHeader) != "")
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		for {
			fmt.Fprintln(w, "tick")
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		conn, _, ok := upgradeWebsocket(w)
		if !ok {
			return
		}
		defer conn.Close()
		for {
			if _, err := conn.Write([]byte{0x81, 4, 't', 'i', 'c', 'k'}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // the site's own pace
		}
	})
	return mux
}

// visit is one visitor's request and what it got.
type visit struct {
	frontend, path, id string
	status             int
	complete           bool // the whole body arrived, and it is the site's
	retryAfter         string
	body               string
}

// siteVisitors load the frontends with a few hundred visitors: short
// pages mostly, slower ones, and a few that would hold for half a
// minute.
type siteVisitors struct {
	mu     sync.Mutex
	visits []visit
	log    *servedLog
	hc     *http.Client
}

func (v *siteVisitors) visit(ctx context.Context, frontend, base, path string) visit {
	id := strconv.FormatInt(v.log.nextID.Add(1), 10)
	out := visit{frontend: frontend, path: path, id: id}
	req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	req.Header.Set("X-Req-Id", id)
	resp, err := v.hc.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	out.status, out.retryAfter, out.body = resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	out.complete = err == nil && resp.StatusCode == 200 && strings.Contains(out.body, siteContent)
	return out
}

func (v *siteVisitors) run(ctx context.Context, frontend, base string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	for ctx.Err() == nil {
		path := "/page"
		if rng.IntN(10) == 0 {
			path = fmt.Sprintf("/slow?ms=%d", 100+rng.IntN(1400))
		}
		got := v.visit(ctx, frontend, base, path)
		if ctx.Err() == nil {
			v.mu.Lock()
			v.visits = append(v.visits, got)
			v.mu.Unlock()
		}
		select { // a visitor's pause between pages
		case <-ctx.Done():
		case <-time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond):
		}
	}
}

// TestDrainASiteUnderLoad: a site behind two frontends (sluice proxy in
// front of an upstream, and the Go middleware), each on its own agent of
// a three-agent cluster, under 300 visitors with short and long requests,
// a stream and a websocket; an operator drains it from the third agent
// with --grace 2s --reason --eta 1m. No request is answered with the
// site's content while the drain's command runs, but the preview's; the
// command starts once the grace is over (the readers still holding are
// revoked, the websocket gets a close frame); visitors get the reason and
// a Retry-After near the expected end; the operator page shows the grace
// and the readers cut; after the command the site serves again. A drain
// whose command fails keeps the site drained until undrained.
func TestDrainASiteUnderLoad(t *testing.T) {
	nodes := agents(t, shortDir(t), 3)
	opAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for i := range nodes {
		var extra []string
		if i == 2 {
			extra = []string{"--http-listen", opAddr}
		}
		run(t, nodes, i, extra...)
	}
	allReady(t, nodes)

	log := &servedLog{byID: map[string]served{}}
	upstream := httptest.NewServer(recordingSite(log))
	defer upstream.Close()
	proxyAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	proxy := start(t, "proxy", "--api", nodes[0].sock, "--listen", proxyAddr, "--upstream", upstream.URL, "--name", "/site",
		"--log-level", "error")
	proxy.waitLine(t, "proxying")
	mc, err := client.New(client.Config{API: nodes[1].sock})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	middleware := httptest.NewServer(mc.Middleware("/site", client.MiddlewareOptions{})(recordingSite(log)))
	defer middleware.Close()
	frontends := map[string]string{"proxy": "http://" + proxyAddr, "middleware": middleware.URL}

	tr := &http.Transport{MaxIdleConnsPerHost: 400, MaxConnsPerHost: 400}
	defer tr.CloseIdleConnections()
	v := &siteVisitors{log: log, hc: &http.Client{Transport: tr, Timeout: bound}}
	ctx, stopVisitors := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stopVisitors(); wg.Wait() }()

	// Requests that would hold for half a minute, a stream and a
	// websocket, on both frontends: only the grace's revocation ends them.
	long := make(chan visit, 4)
	for name, base := range frontends {
		for range 2 {
			wg.Go(func() { long <- v.visit(ctx, name, base, "/slow?ms=30000") })
		}
	}
	stream, err := v.hc.Get(frontends["proxy"] + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if line, err := bufio.NewReader(stream.Body).ReadString('\n'); err != nil || line != "tick\n" {
		t.Fatalf("the stream: %q %v", line, err)
	}
	ws := dialSiteWebsocket(t, proxyAddr)
	closeCode := make(chan uint16, 1)
	go func() { closeCode <- readUntilClose(ws) }()

	for i := range 300 {
		name, base := "proxy", frontends["proxy"]
		if i%2 == 1 {
			name, base = "middleware", frontends["middleware"]
		}
		wg.Go(func() { v.run(ctx, name, base, uint64(i)) })
	}
	// The visitors are served before the drain.
	waitVisits(t, v, func(vs []visit) bool {
		n := map[string]int{}
		for _, x := range vs {
			if x.complete {
				n[x.frontend]++
			}
		}
		return n["proxy"] >= 100 && n["middleware"] >= 100
	})

	dir := shortDir(t)
	started, ended, token, done := filepath.Join(dir, "started"), filepath.Join(dir, "ended"), filepath.Join(dir, "token"),
		filepath.Join(dir, "done")
	cmd := exec.Command(binary, "drain", "/site", "--api", nodes[2].sock, "--grace", "2s", "--reason", "Upgrading the shop to v2",
		"--eta", "1m", "--", "sh", "-c", `date +%s%N > "$1"; printf %s "$SLUICE_PREVIEW_TOKEN" > "$3"; echo cmd-$((1+1))-began; `+
			`i=0; until [ -e "$4" ]; do i=$((i+1)); [ $i -lt 1200 ] || exit 9; sleep 0.05; done; date +%s%N > "$2"`,
		"sh", started, ended, token, done)
	launched := time.Now()
	drain := startProc(t, cmd)

	// During the grace the operator page counts it down.
	var state drainState
	waitState(t, opAddr, &state, func() bool { return len(state.Drains) == 1 && state.Drains[0].GraceLeft != "" })
	if d := state.Drains[0]; d.Holding || d.Reason != "Upgrading the shop to v2" || d.GraceEnd.IsZero() {
		t.Errorf("the operator page during the grace: %+v", d)
	}
	drain.waitLine(t, "readers revoked")
	drain.waitLine(t, "cmd-2-began")
	cmdStart := startedAt(t, started)
	took := time.Duration(cmdStart - launched.UnixNano())
	t.Logf("the drain's command began %v after the drain's start (grace 2s)", took)
	if took < 2*time.Second || took > 12*time.Second {
		t.Errorf("the command began %v after the drain's start, want the 2s grace and not the long requests' 30s", took)
	}
	waitState(t, opAddr, &state, func() bool { return len(state.Drains) == 1 && state.Drains[0].Holding })
	// Cut: the leases of the four half-minute requests, the stream and
	// the websocket, on the shared read tickets of the frontends' agents.
	// A frontend lends its page views of a name one lease, so those that
	// began together may share one: at least one lease per frontend, at
	// most one per request.
	cut := state.Drains[0].Revoked
	t.Logf("readers cut at the grace's end: %d", cut)
	if d := state.Drains[0]; d.Revoked < 2 || d.Revoked > 6 || d.GraceLeft != "0s" {
		t.Errorf("the operator page once drained: %+v, want 2 to 6 readers cut and the grace over", d)
	}

	if code, out, errs := sluice(t, nodes[0].sock, "locks", "/site"); code != 0 || !strings.Contains(out, fmt.Sprintf("readers cut: %d", cut)) ||
		!strings.Contains(out, "readers' grace ends at") || !strings.Contains(out, "preview link given") {
		t.Errorf("sluice locks once the grace is over, from another agent: %d %q %q", code, out, errs)
	}

	// Visitors get the reason and a Retry-After near the expected end;
	// the preview link passes on both frontends.
	for name, base := range frontends {
		var got visit
		waitVisits(t, v, func([]visit) bool {
			got = v.visit(context.Background(), name, base, "/page")
			return got.status == 503 && strings.Contains(got.body, "Upgrading the shop to v2")
		})
		if ra, err := strconv.Atoi(got.retryAfter); err != nil || ra < 40 || ra > 60 {
			t.Errorf("%s: Retry-After %q during a drain with --eta 1m", name, got.retryAfter)
		}
		b, err := os.ReadFile(token)
		if err != nil || len(b) < 40 {
			t.Fatalf("the command's SLUICE_PREVIEW_TOKEN: %q %v", b, err)
		}
		jar, _ := cookiejar.New(nil)
		pc := &http.Client{Jar: jar, Timeout: bound}
		for i := range 3 {
			path := "/page"
			if i == 0 {
				path += "?" + client.PreviewQuery + "=" + string(b)
			}
			id := strconv.FormatInt(log.nextID.Add(1), 10)
			req, _ := http.NewRequest("GET", base+path, nil)
			req.Header.Set("X-Req-Id", id)
			resp, err := pc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if s, ok := log.get(id); resp.StatusCode != 200 || !strings.Contains(string(body), siteContent) || !ok || !s.preview {
				t.Errorf("%s: the preview %s: %d %q, served %+v", name, path, resp.StatusCode, body, s)
			}
		}
	}
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain exited %d", code)
	}
	cmdEnd := startedAt(t, ended)
	select {
	case code := <-closeCode:
		if code != 1001 {
			t.Errorf("the websocket ended with close code %d, want 1001 (going away)", code)
		}
	case <-time.After(bound):
		t.Fatal("the websocket never ended")
	}
	for range 4 {
		if x := <-long; x.complete {
			t.Errorf("a 30s request was answered whole: %+v", x)
		}
	}
	// After the command, the site serves again.
	for name, base := range frontends {
		if got := v.visit(context.Background(), name, base, "/page"); !got.complete {
			t.Errorf("%s after the drain: %d %q", name, got.status, got.body)
		}
	}
	stopVisitors()
	wg.Wait()

	// No answer with the site's content was made while the command ran,
	// but the preview's.
	var answered, refused int
	for _, x := range v.visits {
		switch {
		case x.complete:
			answered++
			s, ok := log.get(x.id)
			if !ok {
				t.Errorf("an answer the site never made: %+v", x)
				continue
			}
			if !s.preview && s.end > cmdStart && s.start < cmdEnd {
				t.Errorf("%s served %s from %v to %v, beside the drain's command (%v to %v)", x.frontend, x.path,
					time.Unix(0, s.start), time.Unix(0, s.end), time.Unix(0, cmdStart), time.Unix(0, cmdEnd))
			}
		case x.status == 503:
			refused++
		}
	}
	t.Logf("%d visits: %d answered with the site's content, %d maintenance pages", len(v.visits), answered, refused)
	if refused == 0 {
		t.Error("no visitor met the maintenance page")
	}

	// A drain whose command fails keeps the site drained until undrained.
	if code, _, errs := sluice(t, nodes[2].sock, "drain", "/site", "--", "sh", "-c", "exit 3"); code != 3 ||
		!strings.Contains(errs, "stays drained") {
		t.Fatalf("a failing drain: exit %d %q", code, errs)
	}
	for name, base := range frontends {
		if got := v.visit(context.Background(), name, base, "/page"); got.status != 503 {
			t.Errorf("%s after a failed drain: %d, want the maintenance page", name, got.status)
		}
	}
	if code, _, errs := sluice(t, nodes[2].sock, "undrain", "/site"); code != 0 {
		t.Fatalf("undrain: %d %q", code, errs)
	}
	for name, base := range frontends {
		if got := v.visit(context.Background(), name, base, "/page"); !got.complete {
			t.Errorf("%s after undrain: %d %q", name, got.status, got.body)
		}
	}
}

// drainState is the operator page's state, as far as drains go.
type drainState struct {
	Drains []struct {
		Name      string    `json:"name"`
		Reason    string    `json:"reason"`
		GraceEnd  time.Time `json:"grace_end"`
		GraceLeft string    `json:"grace_left"`
		Revoked   int       `json:"revoked"`
		Holding   bool      `json:"holding"`
	} `json:"drains"`
}

// waitState polls the operator page's state until cond holds.
func waitState(t *testing.T, addr string, state *drainState, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		code, body := get(t, "http://"+addr+"/api/state", "")
		*state = drainState{}
		if code == 200 && json.Unmarshal([]byte(body), state) == nil && cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operator page's state never came: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's page, bounded
	}
}

// waitVisits polls cond over the visits so far until it holds.
func waitVisits(t *testing.T, v *siteVisitors, cond func([]visit) bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		v.mu.Lock()
		ok := cond(v.visits)
		v.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the visitors never got there")
		}
		time.Sleep(20 * time.Millisecond) // the visitors' progress, bounded
	}
}

// dialSiteWebsocket opens a websocket through the proxy at addr.
func dialSiteWebsocket(t *testing.T, addr string) *bufio.Reader {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprint(conn, "GET /ws HTTP/1.1\r\nHost: site\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("the websocket's upgrade: %v %v", resp, err)
	}
	return br
}

// readUntilClose reads a server's frames until a close frame, and returns
// its status code (0: the connection ended without one).
func readUntilClose(br *bufio.Reader) uint16 {
	for {
		var h [2]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return 0
		}
		n := int(h[1] & 0x7f) // the site's frames and a close frame are short
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			return 0
		}
		if h[0]&0x0f == 8 && n >= 2 {
			return endian.BigEndian.Uint16(payload)
		}
	}
}

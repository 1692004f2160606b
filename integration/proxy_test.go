package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstreamSite is a site behind `sluice proxy`: a page, a stream that runs
// until the test lets it end, and a websocket-like echo over an upgraded
// connection. It notes when the stream and the echo connection ended, in
// Unix nanoseconds, to compare with a drain's command's start.
type upstreamSite struct {
	srv       *httptest.Server
	endStream chan struct{}
	mu        sync.Mutex
	streamEnd int64
	echoEnd   int64
	// streamDone and echoDone close when the stream, the echo ended.
	streamDone, echoDone chan struct{}
	forwarded            string
	hostHeader           string
}

func newUpstreamSite(t *testing.T) *upstreamSite {
	u := &upstreamSite{endStream: make(chan struct{}), streamDone: make(chan struct{}), echoDone: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.forwarded, u.hostHeader = r.Header.Get("X-Forwarded-For"), r.Host
		u.mu.Unlock()
		fmt.Fprintln(w, "hello from upstream")
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			u.mu.Lock()
			if u.streamEnd == 0 {
				u.streamEnd = time.Now().UnixNano()
				close(u.streamDone)
			}
			u.mu.Unlock()
		}()
		for {
			fmt.Fprintln(w, "tick")
			w.(http.Flusher).Flush()
			select {
			case <-u.endStream:
				fmt.Fprintln(w, "end")
				return
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		conn, rw, ok := upgradeWebsocket(w)
		if !ok {
			return
		}
		defer conn.Close()
		_, _ = io.Copy(conn, rw) // echo until the client closes
		u.mu.Lock()
		if u.echoEnd == 0 {
			u.echoEnd = time.Now().UnixNano()
			close(u.echoDone)
		}
		u.mu.Unlock()
	})
	u.srv = httptest.NewServer(mux)
	t.Cleanup(u.srv.Close)
	return u
}

// upgradeWebsocket takes w's connection over and answers the upgrade (a
// test site's websocket: no handshake key is checked); false when the
// connection could not be taken or answered.
func upgradeWebsocket(w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, bool) {
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, false
	}
	fmt.Fprint(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	if rw.Flush() != nil {
		conn.Close()
		return nil, nil, false
	}
	return conn, rw, true
}

func (u *upstreamSite) ended(which *int64) int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return *which
}

// endedBefore waits for done (the upstream's end of something, noted in
// at) and checks that the drain's command, which wrote its start to log,
// began after it.
func (u *upstreamSite) endedBefore(t *testing.T, done chan struct{}, at *int64, log, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("the upstream never saw that %s", what)
	}
	if ended, began := u.ended(at), startedAt(t, log); began < ended {
		t.Errorf("the drain's command began %v before %s", time.Duration(ended-began), what)
	}
}

// startedAt reads the Unix nanoseconds a drain's command wrote to file.
func startedAt(t *testing.T, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return ns
}

// TestProxy: `sluice proxy` in front of a site. Pages pass through with
// the visitor's Host and address; a drain turns new visitors away with
// the maintenance page, and its command starts only once a streamed
// response longer than the agent's --share-lease and an upgraded
// (websocket) connection that held the read lock have ended; after the
// drain pages pass again. An upstream that is down
// is a quick 502; bad flags are usage errors.
func TestProxy(t *testing.T) {
	// A one-second --share-lease: the stream below outlives its lease, so
	// only the proxy's renewals keep the drain out.
	sock := filepath.Join(shortDir(t), "api.sock")
	agent := start(t, "agent", "--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", sock, "--share-lease", "1s",
		"--log-level", "warn")
	agent.waitLine(t, "API on")
	waitReady(t, unixClient(sock))
	site := newUpstreamSite(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	proxy := start(t, "proxy", "--api", sock, "--listen", addr, "--upstream", site.srv.URL, "--name", "/site")
	proxy.waitLine(t, "proxying http://"+addr)
	base := "http://" + addr
	hc := &http.Client{Timeout: bound}

	get := func(path string) (int, http.Header, string) {
		t.Helper()
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	if code, _, body := get("/"); code != 200 || body != "hello from upstream\n" {
		t.Fatalf("a page through the proxy: %d %q", code, body)
	}
	site.mu.Lock()
	fwd, host := site.forwarded, site.hostHeader
	site.mu.Unlock()
	if fwd != "127.0.0.1" || host != addr {
		t.Errorf("the upstream saw X-Forwarded-For %q and Host %q, want 127.0.0.1 and %s", fwd, host, addr)
	}

	// A drain waits for a streamed response that holds the lock.
	stream, err := hc.Get(base + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	streamStart := time.Now()
	sr := bufio.NewReader(stream.Body)
	if line, err := sr.ReadString('\n'); err != nil || line != "tick\n" {
		t.Fatalf("the stream's first line: %q %v", line, err)
	}
	// The stream runs past its lease's first span (--share-lease 1s):
	// what holds the drain out from here is the proxy's renewal.
	for time.Since(streamStart) < 1500*time.Millisecond {
		if _, err := sr.ReadString('\n'); err != nil {
			t.Fatalf("the stream ended early: %v", err)
		}
	}
	log := filepath.Join(shortDir(t), "started")
	drainCmd := exec.Command(binary, "drain", "/site", "--api", sock, "--", "sh", "-c",
		`date +%s%N > "$LOG"; echo cmd-$((1+1))-began; sleep 0.5`)
	drainCmd.Env = append(os.Environ(), "LOG="+log)
	drain := startProc(t, drainCmd)
	// New visitors get the maintenance page while the drain waits.
	deadline := time.Now().Add(bound)
	for {
		code, h, body := get("/")
		if code == 503 {
			if h.Get("Retry-After") != "30" || !strings.Contains(strings.ToLower(body), "maintenance") {
				t.Fatalf("the maintenance page: Retry-After %q, %q", h.Get("Retry-After"), body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("visitors still served while the drain waits: %d %q", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(site.endStream)
	rest, _ := io.ReadAll(sr)
	if !strings.HasSuffix(string(rest), "end\n") {
		t.Errorf("the stream was cut: %q", rest)
	}
	drain.waitLine(t, "cmd-2-began")
	site.endedBefore(t, site.streamDone, &site.streamEnd, log, "the stream ended")
	if code, _, _ := get("/"); code != 503 {
		t.Errorf("a page while the drain's command runs: %d", code)
	}
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain exited %d", code)
	}
	if code, _, body := get("/"); code != 200 {
		t.Fatalf("a page after the drain: %d %q", code, body)
	}

	// An upgraded connection holds the lock as long as it is open.
	ws, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(ws, "GET /ws HTTP/1.1\r\nHost: site\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	wr := bufio.NewReader(ws)
	resp, err := http.ReadResponse(wr, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("the upgrade: %v %v", resp, err)
	}
	fmt.Fprint(ws, "ping\n")
	if line, err := wr.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("the echo: %q %v", line, err)
	}
	log2 := filepath.Join(shortDir(t), "started")
	drainCmd = exec.Command(binary, "drain", "/site", "--api", sock, "--", "sh", "-c", `date +%s%N > "$LOG"; echo cmd-$((1+1))-began`)
	drainCmd.Env = append(os.Environ(), "LOG="+log2)
	drain = startProc(t, drainCmd)
	for deadline := time.Now().Add(bound); ; {
		if code, _, _ := get("/"); code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("visitors still served while the drain waits for the websocket")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Fprint(ws, "still here\n")
	if line, err := wr.ReadString('\n'); err != nil || line != "still here\n" {
		t.Fatalf("the websocket while the drain waits: %q %v", line, err)
	}
	ws.Close()
	drain.waitLine(t, "cmd-2-began")
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain exited %d", code)
	}
	site.endedBefore(t, site.echoDone, &site.echoEnd, log2, "the websocket closed")

	// An upstream that is down: a quick 502 that says so.
	down := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	addr2 := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p2 := start(t, "proxy", "--api", sock, "--listen", addr2, "--upstream", "http://"+down, "--name", "/other")
	p2.waitLine(t, "proxying")
	resp, err = hc.Get("http://" + addr2 + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(b), "did not answer") {
		t.Errorf("an upstream that is down: %d %q", resp.StatusCode, b)
	}

	for _, args := range [][]string{{"proxy"}, {"proxy", "--upstream", "ftp://x"}, {"proxy", "--upstream", "http://"},
		{"proxy", "--upstream", "http://x", "--page", "/no/such/page"}, {"proxy", "--upstream", "http://x", "--host", "nohost"},
		{"proxy", "--upstream", "http://x", "--duration", "0s"}} {
		if code, _, errs := sluice(t, sock, args...); code != 64 || !strings.Contains(errs, "proxy:") {
			t.Errorf("%v: exit %d, %q; want 64", args, code, errs)
		}
	}
}

// TestDrainGraceCutsLongRequests: a drain with --grace waits that long for
// the readers, then revokes them: a stream that would never end is cut
// (behind the proxy: its connection closed), and the drain's command runs
// after it, never beside it.
func TestDrainGraceCutsLongRequests(t *testing.T) {
	sock := startDev(t)
	site := newUpstreamSite(t) // its stream runs until the request ends
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	proxy := start(t, "proxy", "--api", sock, "--listen", addr, "--upstream", site.srv.URL, "--name", "/site")
	proxy.waitLine(t, "proxying")
	stream, err := (&http.Client{Timeout: bound}).Get("http://" + addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	sr := bufio.NewReader(stream.Body)
	if line, err := sr.ReadString('\n'); err != nil || line != "tick\n" {
		t.Fatalf("the stream's first line: %q %v", line, err)
	}
	log := filepath.Join(shortDir(t), "started")
	cmd := exec.Command(binary, "drain", "/site", "--api", sock, "--grace", "1s", "--", "sh", "-c",
		`date +%s%N > "$LOG"; echo cmd-$((1+1))-began`)
	cmd.Env = append(os.Environ(), "LOG="+log)
	drain := startProc(t, cmd)
	drain.waitLine(t, "grace: 1s of 1s left, then they are revoked")
	drain.waitLine(t, "the grace of 1s is over: readers revoked: 1 (on 1 requests)")
	rest, err := io.ReadAll(sr)
	if err == nil && strings.HasSuffix(string(rest), "end\n") {
		t.Fatalf("the stream ended as a whole response after its lock was revoked: %q", rest)
	}
	drain.waitLine(t, "cmd-2-began")
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain exited %d", code)
	}
	site.endedBefore(t, site.streamDone, &site.streamEnd, log, "the cut stream ended")
	if code, _, errs := sluice(t, sock, "drain", "/site", "--grace", "1ms", "--", "true"); code != 64 || !strings.Contains(errs, "--grace") {
		t.Errorf("--grace 1ms: exit %d %q, want 64", code, errs)
	}
}

// TestDrainReasonAndETA: a drain's --reason and --eta reach the visitors
// of `sluice proxy` (the page, JSON for API clients, a Retry-After from
// the expected end) and `sluice locks`.
func TestDrainReasonAndETA(t *testing.T) {
	sock := startDev(t)
	site := newUpstreamSite(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	proxy := start(t, "proxy", "--api", sock, "--listen", addr, "--upstream", site.srv.URL, "--name", "/site")
	proxy.waitLine(t, "proxying")
	done := filepath.Join(shortDir(t), "done")
	drain := start(t, "drain", "/site", "--api", sock, "--reason", "Upgrading to v2", "--eta", "1m", "--", "sh", "-c",
		`echo cmd-$((1+1))-began; i=0; until [ -e "$1" ]; do i=$((i+1)); [ $i -lt 1200 ] || exit 9; sleep 0.05; done`, "sh", done)
	drain.waitLine(t, "cmd-2-began")

	get := func(accept string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := (&http.Client{Timeout: bound}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	// The proxy asks the cluster's table for the writer's word, at most
	// every 2 s: the first pages may come before it has it.
	var code int
	var h http.Header
	var body string
	for deadline := time.Now().Add(bound); ; time.Sleep(50 * time.Millisecond) {
		if code, h, body = get(""); code == 503 && strings.Contains(body, "Upgrading to v2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the maintenance page never gave the reason: %d %q", code, body)
		}
	}
	if !strings.Contains(body, "We expect to be back at") {
		t.Errorf("the page does not say when: %q", body)
	}
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q, want the seconds left of the 1m ETA", h.Get("Retry-After"))
	}
	code, h, body = get("application/json")
	if code != 503 || h.Get("Content-Type") != "application/json" || !strings.Contains(body, `"reason":"Upgrading to v2"`) ||
		!strings.Contains(body, `"error":"maintenance"`) || !strings.Contains(body, `"eta":"`) {
		t.Errorf("the maintenance answer in JSON: %d %q %q", code, h.Get("Content-Type"), body)
	}
	if code, out, errs := sluice(t, sock, "locks", "/site"); code != 0 || !strings.Contains(out, `"Upgrading to v2"`) ||
		!strings.Contains(out, "expected done at") {
		t.Errorf("sluice locks: %d %q %q", code, out, errs)
	}
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain exited %d", code)
	}

	// Bad input: clear usage errors.
	bad := filepath.Join(shortDir(t), "page.html")
	if err := os.WriteFile(bad, []byte("<p>{{.Reason</p>"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"drain", "/site", "--reason", "a\nb", "--", "true"},
		{"drain", "/site", "--reason", strings.Repeat("x", 300), "--", "true"},
		{"drain", "/site", "--eta", "-1s", "--", "true"},
		{"drain", "/site", "--preview-url", "ftp://shop.example/", "--", "true"},
		{"drain", "/site", "--preview-url", "/relative", "--", "true"},
		{"proxy", "--upstream", "http://x", "--page", bad},
	} {
		if code, _, errs := sluice(t, sock, args...); code != 64 {
			t.Errorf("%q: exit %d %q, want 64", args, code, errs)
		}
	}
}

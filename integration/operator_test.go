package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// get fetches url with an optional bearer token: status and body.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: bound}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestOperatorListener: --http-listen serves /metrics, /healthz, /readyz
// and the live page of the cluster, a drain in progress on it; off
// loopback it is refused without a token or an allow-list; a token is
// asked for, and an allow-list keeps other networks out.
func TestOperatorListener(t *testing.T) {
	dir := shortDir(t)
	port := freePort(t)
	sock := filepath.Join(dir, "api.sock")
	token := filepath.Join(dir, "http.token")
	if err := os.WriteFile(token, []byte("op-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--http-listen", "0.0.0.0:9100"}, "--http-token-file or --http-allow"},
		{[]string{"--http-listen", "localhost"}, "--http-listen"},
		{[]string{"--http-listen", "127.0.0.1:9100", "--http-allow", "not-a-net"}, "--http-allow"},
		{[]string{"--http-token-file", token}, "are for --http-listen"},
	} {
		args := append([]string{"agent", "--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", filepath.Join(dir, "bad.sock")}, tc.args...)
		code, _, errs := sluice(t, "", args...)
		if code != 64 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d %q, want 64 and %q", tc.args, code, errs, tc.want)
		}
		oneLine(t, errs)
	}

	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := start(t, "agent", "--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", sock, "--name", "web-7",
		"--http-listen", addr, "--http-token-file", token)
	p.waitLine(t, "operator page on http://"+addr)
	waitReady(t, unixClient(sock))
	base := "http://" + addr
	if code, _ := get(t, base+"/metrics", ""); code != 401 {
		t.Fatalf("/metrics without the token: %d, want 401", code)
	}
	if code, body := get(t, base+"/metrics", "op-s3cret"); code != 200 || !strings.Contains(body, "sluice_ready 1") {
		t.Fatalf("/metrics: %d", code)
	}
	if code, body := get(t, base+"/healthz?token=op-s3cret", ""); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz", "op-s3cret"); code != 200 || body != "LOCK_READY\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}

	// A drain in progress: a reader holds /site, a priority writer waits.
	reader := start(t, "lock", "/site", "--api", sock, "--mode", "read-only", "--", "sh", "-c", "echo reading; exec sleep 30")
	reader.waitLine(t, "reading")
	drain := start(t, "drain", "/site", "--api", sock, "--", "echo", "maintenance")
	var state struct {
		Drains []struct {
			Name    string `json:"name"`
			Readers int    `json:"readers_left"`
		} `json:"drains"`
	}
	deadline := time.Now().Add(bound)
	for {
		code, body := get(t, base+"/api/state", "op-s3cret")
		if code != 200 || json.Unmarshal([]byte(body), &state) != nil {
			t.Fatalf("/api/state: %d %q", code, body)
		}
		if len(state.Drains) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the page's state for the writer's ticket, bounded
	}
	if len(state.Drains) != 1 || state.Drains[0].Name != "/site" || state.Drains[0].Readers != 1 {
		t.Fatalf("drains on the page's state: %+v", state.Drains)
	}
	// A browser's first visit with ?token=: the token goes into a cookie
	// and the page is at / without it (not in history, links or the page).
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browserLike := &http.Client{Timeout: bound, Jar: jar}
	resp, err := browserLike.Get(base + "/?token=op-s3cret")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	code, page := resp.StatusCode, string(b)
	if resp.Request.URL.String() != base+"/" || strings.Contains(page, "op-s3cret") {
		t.Fatalf("the first visit ends at %s, the page has the token: %v", resp.Request.URL, strings.Contains(page, "op-s3cret"))
	}
	wrong, err := http.NewRequest("GET", base+"/api/state", nil)
	if err != nil {
		t.Fatal(err)
	}
	wrong.AddCookie(&http.Cookie{Name: "sluice_operator", Value: "guess"})
	if resp, err := (&http.Client{Timeout: bound}).Do(wrong); err != nil || resp.StatusCode != 401 {
		t.Fatalf("a cookie with a wrong token: %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}
	if code != 200 || !strings.Contains(page, `<td>&#34;/site&#34;</td><td>read-write-priority</td>`) ||
		!strings.Contains(page, "LOCK_READY") ||
		!strings.Contains(page, "<h1>sluice — node web-7 ") || !strings.Contains(page, "<td>web-7</td><td>holder</td>") {
		t.Fatalf("the page: %d\n%s", code, page)
	}
	if browser := chromium(); browser != "" {
		checkInBrowser(t, browser, base+"/?token=op-s3cret", dir)
	} else {
		t.Log("no chromium: the page was checked as HTML only (apt-get install chromium for the browser check)")
	}
	if err := reader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	reader.wait(t)
	if code := drain.wait(t); code != 0 {
		t.Fatalf("the drain exited %d", code)
	}
	stopAgent(t, p)

	// An allow-list that leaves loopback out.
	p = start(t, "agent", "--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", sock,
		"--http-listen", addr, "--http-allow", "10.0.0.0/8")
	p.waitLine(t, "operator page on")
	if code, _ := get(t, base+"/healthz", ""); code != 403 {
		t.Fatalf("/healthz from a network not allowed: %d, want 403", code)
	}
	stopAgent(t, p)
}

// chromium is Debian's headless browser, "" when not installed.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// checkInBrowser loads url in headless Chromium, lets the page's script
// refresh it, and checks the DOM it ends with and its screenshot.
func checkInBrowser(t *testing.T, browser, url, dir string) {
	t.Helper()
	shot := filepath.Join(dir, "page.png")
	common := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--user-data-dir=" + filepath.Join(dir, "chromium"),
		"--virtual-time-budget=5000", "--window-size=1280,900"}
	out, err := exec.Command(browser, append(common, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	dom := string(out)
	if !strings.Contains(dom, "<h2>Drains</h2>") || !strings.Contains(dom, `"/site"`) || !strings.Contains(dom, "<title>sluice: LOCK_READY</title>") {
		t.Fatalf("the page in a browser, after its refreshes:\n%s", dom)
	}
	if out, err := exec.Command(browser, append(common, "--screenshot="+shot, url)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	b, err := os.ReadFile(shot)
	if err != nil || len(b) < 10_000 || string(b[1:4]) != "PNG" {
		t.Fatalf("screenshot: %d bytes, %v", len(b), err)
	}
	if keep := os.Getenv("SLUICE_SCREENSHOT"); keep != "" {
		_ = os.WriteFile(keep, b, 0o644)
	}
}

// TestDevOperatorPage: `sluice dev --http-listen` serves the first node's
// operator page on loopback, and refuses any other address.
func TestDevOperatorPage(t *testing.T) {
	sock := filepath.Join(shortDir(t), "api.sock")
	if code, _, errs := sluice(t, sock, "dev", "--http-listen", "0.0.0.0:9100"); code != 64 || !strings.Contains(errs, "loopback only") {
		t.Fatalf("dev --http-listen 0.0.0.0:9100: exit %d %q", code, errs)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dev := start(t, "dev", "--api", sock, "--http-listen", addr)
	dev.waitLine(t, "export SLUICE_API="+sock)
	dev.waitLine(t, "operator page on http://"+addr+"/")
	dev.waitLine(t, "LOCK_READY")
	if code, body := get(t, "http://"+addr+"/readyz", ""); code != 200 || body != "LOCK_READY\n" {
		t.Fatalf("/readyz of sluice dev: %d %q", code, body)
	}
	if code, page := get(t, "http://"+addr+"/", ""); code != 200 || !strings.Contains(page, "sluice — node dev-1 ") {
		t.Fatalf("the operator page of sluice dev: %d\n%s", code, page)
	}
}

// TestOperatorPageSaysUnreachable: the live page, open in a browser, turns
// red and says so when its agent stops answering, rather than go on
// showing its last word as if it were live. The page the agent served is
// replayed by a stand-in whose refreshes fail.
func TestOperatorPageSaysUnreachable(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no chromium (apt-get install chromium): the page's script is checked in a browser only")
	}
	dir := shortDir(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := start(t, "agent", "--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", filepath.Join(dir, "api.sock"),
		"--http-listen", addr)
	p.waitLine(t, "operator page on")
	waitReady(t, unixClient(filepath.Join(dir, "api.sock")))
	code, page := get(t, "http://"+addr+"/", "")
	if code != 200 || !strings.Contains(page, "LOCK_READY") {
		t.Fatalf("the page: %d %s", code, page)
	}
	stopAgent(t, p)
	standIn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fragment") != "" {
			http.Error(w, "agent gone", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, page)
	}))
	defer standIn.Close()
	out, err := exec.Command(browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "chromium"), "--virtual-time-budget=5000", "--dump-dom", standIn.URL+"/").Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	dom := string(out)
	if !strings.Contains(dom, `id="unreachable"`) || !strings.Contains(dom, "UNREACHABLE: this agent has not answered since") ||
		strings.Contains(dom, `class="ready"`) || !strings.Contains(dom, "<title>sluice: unreachable (502") {
		t.Fatalf("the page after failed refreshes:\n%s", dom)
	}
}

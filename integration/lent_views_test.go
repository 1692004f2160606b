package integration

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProxyCountsLentPageViews: `sluice proxy` lends one read lease to
// its page views, and says how many run on it, so that the operator's
// tools count page views, not the proxy: `sluice locks` shows the share's
// readers as the page views in flight, and `sluice drain` counts them
// down one by one before its command runs.
func TestProxyCountsLentPageViews(t *testing.T) {
	sock := filepath.Join(shortDir(t), "api.sock")
	agent := start(t, "agent", "--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", sock, "--log-level", "warn")
	agent.waitLine(t, "API on")
	waitReady(t, unixClient(sock))
	arrived, next := make(chan struct{}), make(chan struct{})
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "page")
	}))
	defer site.Close()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	proxy := start(t, "proxy", "--api", sock, "--listen", addr, "--upstream", site.URL, "--name", "/site")
	proxy.waitLine(t, "proxying http://"+addr)
	hc := &http.Client{Timeout: bound}
	pages := make(chan error, 3)
	for range 3 {
		go func() {
			resp, err := hc.Get("http://" + addr + "/")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "page" {
					err = fmt.Errorf("a page view: %d %q", resp.StatusCode, b)
				}
			}
			pages <- err
		}()
		select { // one at a time: each after the lease was lent
		case <-arrived:
		case <-time.After(bound):
			t.Fatal("a page view never reached the site")
		}
	}

	var out string
	for deadline := time.Now().Add(bound); ; time.Sleep(100 * time.Millisecond) {
		code, o, errs := sluice(t, sock, "locks", "/site")
		if out = o; code == 0 && strings.Contains(out, "shared read ticket, readers on it: 3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice locks while 3 page views run on the proxy's lent lease: exit %d\n%s%s", code, out, errs)
		}
	}
	t.Logf("sluice locks while 3 page views run on the proxy's lent lease:\n%s", out)

	drain := start(t, "drain", "/site", "--api", sock, "--", "echo", "maintenance runs")
	drain.waitLine(t, "3 readers left")
	for _, left := range []string{"2 readers left", "1 readers left", "maintenance runs"} {
		next <- struct{}{}
		drain.waitLine(t, left)
	}
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain exited %d", code)
	}
	for range 3 {
		if err := <-pages; err != nil {
			t.Fatal(err)
		}
	}
}

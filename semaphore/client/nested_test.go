package client_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

func TestRequestName(t *testing.T) {
	for _, c := range []struct {
		site, path string
		levels     int
		want       string
	}{
		{"https://shop.example/", "/shop/cart/1", 2, "https://shop.example/shop/cart"},
		{"https://shop.example/", "/shop/cart/1", 1, "https://shop.example/shop"},
		{"https://shop.example/", "/", 2, "https://shop.example/"},
		{"https://shop.example/", "", 2, "https://shop.example/"},
		{"/site", "/blog/post", 3, "/site/blog/post"},
		{"/site", "/a//b", 3, "/site/a"},
		{"/site", "/a/../b", 3, "/site/a"},
		{"/site", "/./b", 3, "/site"},
		{"/site", "/a%2Fb/c", 1, "/site/a%2Fb"},
	} {
		if got := client.RequestName(c.site, c.path, c.levels); got != c.want {
			t.Errorf("RequestName(%q, %q, %d) = %q, want %q", c.site, c.path, c.levels, got, c.want)
		}
	}
}

// With an agent of nested names and PathLevels, a drain of part of the
// site turns away that part's visitors only, with its writer's reason,
// and a drain of the site all of them.
func TestMiddlewarePathLevels(t *testing.T) {
	c := startNestedAgent(t)
	ctx := ctxT(t)
	names := make(chan string, 10)
	site := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		names <- client.LeaseFrom(r.Context()).Name()
		io.WriteString(w, "hello")
	})
	// Two frontends: the writers' word is kept a while by each.
	frontend := func() *httptest.Server {
		srv := httptest.NewServer(c.Middleware("https://Shop.example/", client.MiddlewareOptions{PathLevels: 1})(site))
		t.Cleanup(srv.Close)
		return srv
	}
	srv := frontend()
	visit := func(path string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		req.Header.Set("Accept", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var page map[string]any
		if resp.StatusCode == 503 {
			_ = json.NewDecoder(resp.Body).Decode(&page)
		}
		return resp.StatusCode, page
	}
	if code, _ := visit("/shop/cart"); code != 200 || <-names != "https://shop.example/shop" {
		t.Fatalf("a visit of /shop/cart: %d", code)
	}
	drain, err := c.Acquire(ctx, "https://shop.example/shop", semaphore.ReadWritePriority,
		client.Options{Try: true, Duration: time.Minute, Reason: "new shop"})
	if err != nil {
		t.Fatal(err)
	}
	if code, page := visit("/shop/cart"); code != 503 || page["reason"] != "new shop" {
		t.Fatalf("the shop during its drain: %d %v", code, page)
	}
	if code, _ := visit("/blog/post"); code != 200 || <-names != "https://shop.example/blog" {
		t.Fatalf("the blog during the shop's drain: %d", code)
	}
	if err := drain.Release(ctx); err != nil {
		t.Fatal(err)
	}
	srv = frontend()
	drain, err = c.Acquire(ctx, "https://shop.example/", semaphore.ReadWritePriority,
		client.Options{Try: true, Duration: time.Minute, Reason: "all of it"})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/blog/post", "/shop", "/"} {
		if code, page := visit(path); code != 503 || page["reason"] != "all of it" {
			t.Fatalf("%s during the site's drain: %d %v", path, code, page)
		}
	}
	if err := drain.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// startNestedAgent is startAgent for an agent of nested names.
func startNestedAgent(t *testing.T) *client.Client {
	t.Helper()
	_, c := startAgentWith(t, daemon.AgentConfig{NestedNames: true})
	return c
}

// The leases of an acquire of several nested names share one id: each
// renews, and releasing them all is no error.
func TestAcquireAllNested(t *testing.T) {
	c := startNestedAgent(t)
	ctx := ctxT(t)
	ls, err := c.AcquireAll(ctx, []string{"/site/b", "/site/a"}, semaphore.Exclusive, client.Options{Try: true, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].ID() != ls[1].ID() || ls[0].Name() != "/site/a" || ls[0].Token() == 0 || ls[1].Token() == 0 {
		t.Fatalf("leases %v %v", ls[0], ls[1])
	}
	for _, l := range ls {
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("renew %s: %v", l.Name(), err)
		}
	}
	if err := client.ReleaseAll(ctx, ls...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "/site", semaphore.Exclusive, client.Options{Try: true, Duration: time.Minute}); err != nil {
		t.Fatalf("/site after the release: %v", err)
	}
}

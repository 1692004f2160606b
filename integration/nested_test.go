package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNestedNamesDrainPartOfASite: three `sluice agent` processes with
// --nested-names; page views on /site/shop/* and /site/blog/* come through
// two of them. `sluice drain /site/shop` turns away only the shop's page
// views, on both agents, and waits only for them: it runs while the blog's
// readers still hold. `sluice drain /site` turns every page view away. A
// job that holds /site/shop/cart keeps a drain of /site/shop and of /site
// out.
func TestNestedNamesDrainPartOfASite(t *testing.T) {
	nodes := agents(t, shortDir(t), 3)
	for i := range nodes {
		run(t, nodes, i, "--nested-names")
	}
	allReady(t, nodes)
	frontends := []*http.Client{nodes[0].c, nodes[1].c}

	// view takes a page view (a READ_ONLY try) through frontend f: its
	// lease, or "" and the error code.
	view := func(f int, name string) (string, string) {
		t.Helper()
		code, out := post(t, frontends[f], "/v1/acquire", fmt.Sprintf(`{"name":%q,"mode":"read-only","try":true,"duration":"2m"}`, name))
		if code == 200 {
			return out["lease"].(string), ""
		}
		e, _ := out["error"].(string)
		return "", e
	}
	release := func(f int, lease string) {
		t.Helper()
		if code, out := post(t, frontends[f], "/v1/release", fmt.Sprintf(`{"lease":%q}`, lease)); code != 200 {
			t.Fatalf("release %s: %d %v", lease, code, out)
		}
	}
	// reopened waits (bounded) until a page view of name through f is
	// let in again after a drain ended: the drain's release reaches the
	// frontend's shares within a message's time, and until then the
	// frontend still answers draining.
	reopened := func(f int, name string) {
		t.Helper()
		for i := 0; ; i++ {
			l, e := view(f, name)
			if l != "" {
				release(f, l)
				return
			}
			if e != "draining" || i == 200 {
				t.Fatalf("page view %s through agent %d after its drain: error %q, want a lease", name, f+1, e)
			}
			time.Sleep(25 * time.Millisecond) // a poll of the other agents' state
		}
	}
	mustView := func(f int, name string) string {
		t.Helper()
		l, e := view(f, name)
		if l == "" {
			t.Fatalf("page view %s through agent %d: %s", name, f+1, e)
		}
		return l
	}
	// refused waits (bounded) until a page view of name through f is
	// turned away as draining: the drain's word reaches each agent's
	// shares within a message's time.
	refused := func(f int, name string) {
		t.Helper()
		for i := 0; ; i++ {
			l, e := view(f, name)
			if e == "draining" {
				return
			}
			if l == "" || i == 200 {
				t.Fatalf("page view %s through agent %d during its drain: lease %q, error %q, want draining", name, f+1, l, e)
			}
			release(f, l)
			time.Sleep(25 * time.Millisecond) // a poll of the other agents' state
		}
	}

	type held struct {
		f     int
		lease string
	}
	var shop, blog []held
	for f := range frontends {
		shop = append(shop, held{f, mustView(f, fmt.Sprintf("/site/shop/page%d", f))})
		blog = append(blog, held{f, mustView(f, fmt.Sprintf("/site/blog/post%d", f))})
	}

	// drain /site/shop: its CMD says so, then waits for a file.
	done := filepath.Join(t.TempDir(), "done")
	drain := start(t, "drain", "--api", nodes[2].sock, "/site/shop", "--", "sh", "-c",
		fmt.Sprintf(`echo drained shop; while [ ! -e %s ]; do sleep 0.05; done`, done))
	drain.waitLine(t, "draining /site/shop")
	for f := range frontends {
		refused(f, "/site/shop/other")
		l := mustView(f, "/site/blog/other") // the blog stays open
		release(f, l)
	}
	if seen(drain, "drained shop") {
		t.Fatal("the drain of /site/shop ran while page views of the shop held")
	}
	for _, h := range shop {
		release(h.f, h.lease)
	}
	drain.waitLine(t, "drained shop") // the blog's readers still hold
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain /site/shop exited %d", code)
	}
	for f := range frontends {
		reopened(f, "/site/shop/again")
	}

	// drain /site: every page view is turned away, and it waits for the
	// blog's readers.
	if err := os.Remove(done); err != nil {
		t.Fatal(err)
	}
	drain = start(t, "drain", "--api", nodes[2].sock, "/site", "--", "sh", "-c",
		fmt.Sprintf(`echo drained site; while [ ! -e %s ]; do sleep 0.05; done`, done))
	drain.waitLine(t, "draining /site")
	for f := range frontends {
		refused(f, "/site/shop/x")
		refused(f, "/site/blog/x")
	}
	if seen(drain, "drained site") {
		t.Fatal("the drain of /site ran while page views of the blog held")
	}
	for _, h := range blog {
		release(h.f, h.lease)
	}
	drain.waitLine(t, "drained site")
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain /site exited %d", code)
	}

	// A job on /site/shop/cart keeps out drains of /site/shop and /site,
	// and not a reader of the blog.
	job := start(t, "lock", "--api", nodes[0].sock, "/site/shop/cart", "--", "sh", "-c",
		fmt.Sprintf(`echo job holds; while [ -e %s ]; do sleep 0.05; done`, done))
	job.waitLine(t, "job holds")
	for _, name := range []string{"/site/shop", "/site"} {
		code, out := post(t, nodes[1].c, "/v1/acquire", fmt.Sprintf(`{"name":%q,"mode":"read-write-priority","try":true}`, name))
		if code == 200 || out["error"] != "timedout" {
			t.Fatalf("a drain of %s while a job holds /site/shop/cart: %d %v, want timedout", name, code, out)
		}
	}
	reopened(1, "/site/blog/post") // the drain of /site ended
	if _, e := view(0, "/site/shop/cart"); e != "draining" {
		t.Fatalf("a page view of the job's page: %q, want draining", e)
	}
	if err := os.Remove(done); err != nil {
		t.Fatal(err)
	}
	if code := job.wait(t); code != 0 {
		t.Fatalf("the job exited %d", code)
	}
}

// seen reports whether p printed a line containing s so far, without
// waiting for more.
func seen(p *proc, s string) bool {
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return strings.Contains(p.output.String(), s)
			}
			p.output.WriteString(l + "\n")
		default:
			return strings.Contains(p.output.String(), s)
		}
	}
}

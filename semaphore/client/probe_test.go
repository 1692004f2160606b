package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/daemon"
)

func TestProbe(t *testing.T) {
	dir, _ := os.MkdirTemp("", "sl")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "a.sock")
	t0 := time.Now()
	a, err := daemon.StartAgent(context.Background(), daemon.AgentConfig{Name: "solo", InMemory: true, ClusterSize: 1, API: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	ts := func() string { return time.Since(t0).Round(time.Millisecond).String() }
	post := func(p, b string) map[string]any {
		r, err := c.Post("http://x"+p, "application/json", strings.NewReader(b))
		if err != nil {
			fmt.Println(ts(), err)
			return nil
		}
		defer r.Body.Close()
		x, _ := io.ReadAll(r.Body)
		fmt.Println(ts(), p, b, "->", r.StatusCode, strings.TrimSpace(string(x)))
		m := map[string]any{}
		json.Unmarshal(x, &m)
		return m
	}
	watch := func(id string) {
		go func() {
			r, err := c.Get("http://x/v1/watch?lease=" + id)
			if err != nil {
				fmt.Println("watch", err)
				return
			}
			s := bufio.NewScanner(r.Body)
			for s.Scan() {
				fmt.Println(ts(), "watch", id, s.Text())
			}
			fmt.Println(ts(), "watch end", id, s.Err())
		}()
	}
	post("/v1/acquire", `{"name":"/a","try":true}`)
	post("/v1/acquire", `{"name":"/a","try":true}`)
	b := post("/v1/acquire", `{"name":"/b","duration":"10m"}`)
	post("/v1/acquire", `{"name":"/b","mode":"read-only","try":true}`)
	cc := post("/v1/acquire", `{"name":"/c","duration":"10m"}`)
	watch(cc["lease"].(string))
	time.Sleep(50 * time.Millisecond)
	post("/v1/force-unlock", fmt.Sprintf(`{"name":"/c","lease":%q}`, cc["lease"]))
	time.Sleep(200 * time.Millisecond)
	post("/v1/renew", fmt.Sprintf(`{"lease":%q}`, cc["lease"]))
	time.Sleep(200 * time.Millisecond)
	post("/v1/renew", fmt.Sprintf(`{"lease":%q}`, cc["lease"]))
	e := post("/v1/acquire", `{"name":"/e","duration":"300ms"}`)
	watch(e["lease"].(string))
	time.Sleep(1500 * time.Millisecond)
	post("/v1/renew", fmt.Sprintf(`{"lease":%q}`, e["lease"]))
	_ = b
}

package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/p2p"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// BenchmarkAPIAcquireRelease measures what one client of `sluice dev` sees:
// acquire then release of one exclusive lock through the Unix-socket API
// of a 3-node cluster on loopback, one cycle at a time. It reports the
// cycle's p50 and p99. "disk" puts Badger on files (fsync per write, the
// agent's default), "memory" is what `sluice dev` runs without --data.
//
//	go test ./semaphore/daemon -run '^$' -bench AcquireRelease -benchtime 2000x
func BenchmarkAPIAcquireRelease(b *testing.B) {
	for _, disk := range []bool{false, true} {
		name := "memory"
		if disk {
			name = "disk"
		}
		b.Run(name, func(b *testing.B) { benchCycle(b, disk) })
	}
}

func benchCycle(b *testing.B, disk bool) {
	sock := benchCluster(b, disk)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	post := func(path, body string) map[string]any {
		resp, err := client.Post("http://sluice"+path, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			b.Fatalf("%s: %d %v %v", path, resp.StatusCode, out, err)
		}
		return out
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		l := post("/v1/acquire", `{"name":"/bench","timeout":"10s","duration":"1m"}`)
		post("/v1/release", fmt.Sprintf(`{"lease":%q}`, l["lease"]))
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}

// benchCluster starts 3 agents on loopback, the first with its API on a
// Unix socket (returned) once it is ready, and stops them when b ends.
func benchCluster(b *testing.B, disk bool) string {
	dir, err := os.MkdirTemp("", "slb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	var agents []*daemon.Agent
	b.Cleanup(func() {
		for _, a := range agents {
			ctx, cancel := context.WithTimeout(context.Background(), settle)
			_ = a.Stop(ctx)
			cancel()
		}
	})
	var peers, members []string
	keys := make([]p2p.PrivKey, 3)
	for i := range keys {
		var err error
		if disk {
			keys[i], _, err = p2p.LoadOrCreateIdentity(filepath.Join(dir, fmt.Sprintf("n%d", i+1)))
		} else {
			keys[i], err = p2p.NewIdentity()
		}
		if err != nil {
			b.Fatal(err)
		}
		pid, _ := p2p.PeerIDOf(keys[i])
		members = append(members, pid.String())
	}
	for i := range 3 {
		cfg := daemon.AgentConfig{Name: fmt.Sprintf("b%d", i+1), InitialMembers: members, InMemory: !disk,
			Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Peers: peers}
		if disk {
			cfg.DataDir = filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		} else {
			cfg.Key = keys[i]
		}
		if i == 0 {
			cfg.API = sock
		}
		a, err := daemon.StartAgent(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		agents = append(agents, a)
		peers = append(peers, a.Host().Addrs()...)
	}
	deadline := time.Now().Add(settle)
	for {
		s, err := agents[0].Node().Status(context.Background())
		if err == nil && s.Ready {
			return sock
		}
		if time.Now().After(deadline) {
			b.Fatalf("not ready: %+v %v", s, err)
		}
		time.Sleep(10 * time.Millisecond) // polling readiness before the clock starts, not a signal in a test
	}
}

// BenchmarkSharedReadTry measures the web frontend's path: a READ_ONLY try
// and its release on one name through the Go client's compact protocol,
// one at a time, granted on the agent's shared read ticket. It reports the
// try's p50 and p99 (what the middleware adds before the handler runs).
//
//	go test ./semaphore/daemon -run '^$' -bench SharedReadTry -benchtime 20000x
func BenchmarkSharedReadTry(b *testing.B) {
	sock := benchCluster(b, false)
	c, err := client.New(client.Config{API: sock})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	o := client.Options{Try: true, Duration: time.Minute}
	for range 100 { // the share, and the pool's connections
		l, err := c.Acquire(ctx, "/site", semaphore.ReadOnly, o)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		l, err := c.Acquire(ctx, "/site", semaphore.ReadOnly, o)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkSharedReadPageView measures a page view's calls, one at a
// time: a READ_ONLY try granted on the agent's shared read ticket and its
// release, through the Go client's compact protocol. "answered" waits for
// the release's answer (Lease.Release, two round trips), "no-answer" does
// not (Lease.ReleaseNoWait, the middleware's: one round trip and a write).
// It reports the whole view's p50 and p99.
//
//	go test ./semaphore/daemon -run '^$' -bench SharedReadPageView -benchtime 20000x
func BenchmarkSharedReadPageView(b *testing.B) {
	sock := benchCluster(b, false)
	for _, noAnswer := range []bool{false, true} {
		name := "answered"
		if noAnswer {
			name = "no-answer"
		}
		b.Run(name, func(b *testing.B) {
			c, err := client.New(client.Config{API: sock})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			o := client.Options{Try: true, Duration: time.Minute}
			view := func() {
				l, err := c.Acquire(ctx, "/site", semaphore.ReadOnly, o)
				if err != nil {
					b.Fatal(err)
				}
				if noAnswer {
					err = l.ReleaseNoWait(ctx)
				} else {
					err = l.Release(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			for range 100 { // the share, and the pool's connections
				view()
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				view()
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

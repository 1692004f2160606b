package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
)

// readyTimeout bounds the wait for a cluster to serve after its start.
const readyTimeout = 60 * time.Second

// buildSluice builds the checkout's sluice binary into dir. It builds in
// the main module (found through this module's replace), so the binary
// has the dependency versions sluice itself pins, not the ones this
// module's etcd client raised.
func buildSluice(ctx context.Context, dir string) (bin, root string, err error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/sluicehq/sluice").Output()
	if err != nil {
		return "", "", fmt.Errorf("finding the sluice checkout (go list -m): %w", err)
	}
	root = strings.TrimSpace(string(out))
	bin = filepath.Join(dir, "sluice")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build ./cmd/sluice in %s: %w\n%s", root, err, out)
	}
	return bin, root, nil
}

// sluiceCluster is three `sluice agent` processes on loopback with a
// cluster secret, and one client per agent.
type sluiceCluster struct {
	storage storage
	// nested: the agents run with --nested-names (W4n), a cluster of its
	// own so that every other workload keeps flat names.
	nested  bool
	dir     string
	agents  []*process
	clients []*client.Client
	// bin, socks and logDir run more of the binary beside the agents
	// (sluice proxy, in the middleware workload).
	bin    string
	socks  []string
	logDir string
	// profileDir: with -profile, where stop leaves each agent's /metrics
	// text beside its CPU profile (the phase and store histograms).
	profileDir string
}

// startSluice starts a 3-agent cluster. Durable agents keep their data
// directories under the system's temporary directory (a disk here);
// in-memory agents run with --in-memory and the identity of a key file
// (`--key-file`), so every first member's peer id is known before any
// starts. With profileDir set, each agent writes its CPU profile there.
// Nested agents run with --nested-names; they report ready only once the
// cluster's codec allows nested names, which the wait below includes.
func startSluice(ctx context.Context, bin string, st storage, nested bool, logDir, profileDir string) (_ *sluiceCluster, err error) {
	dir, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return nil, err
	}
	c := &sluiceCluster{storage: st, nested: nested, dir: dir, bin: bin, logDir: logDir, profileDir: profileDir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	psk, err := writeSecret(filepath.Join(dir, "swarm.key"))
	if err != nil {
		return nil, err
	}
	const n = 3
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	ids := make([]string, n)
	addrs := make([]string, n)
	for i := range n {
		// The data directory, or for in-memory agents only a directory
		// for the key: `sluice id` makes the key and prints its peer id.
		if ids[i], err = sluiceID(ctx, bin, filepath.Join(dir, fmt.Sprintf("n%d", i+1))); err != nil {
			return nil, err
		}
		addrs[i] = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", ports[i], ids[i])
	}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		node := filepath.Join(dir, name)
		sock := filepath.Join(dir, name+".sock")
		var peers []string
		for j, a := range addrs {
			if j != i {
				peers = append(peers, a)
			}
		}
		args := []string{"agent", "--name", name, "--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i]),
			"--peers", strings.Join(peers, ","), "--initial-members", strings.Join(ids, ","),
			"--api", sock, "--psk-file", psk, "--log-level", "warn"}
		if st == durable {
			args = append(args, "--data", node)
		} else {
			args = append(args, "--in-memory", "--key-file", filepath.Join(node, "identity.key"))
		}
		if nested {
			args = append(args, "--nested-names")
		}
		if profileDir != "" {
			args = append(args, "--cpu-profile", filepath.Join(profileDir, fmt.Sprintf("cpu-%s-%s-%s.pprof", c.fileTag(), st, name)))
		}
		p, err := startProcess("sluice agent "+name, filepath.Join(logDir, fmt.Sprintf("%s-%s-%s.log", c.fileTag(), st, name)), bin, args...)
		if err != nil {
			return nil, err
		}
		c.agents = append(c.agents, p)
		c.socks = append(c.socks, sock)
		cl, err := client.New(client.Config{API: sock})
		if err != nil {
			return nil, err
		}
		c.clients = append(c.clients, cl)
	}
	err = waitFor(ctx, c.label()+" "+st.String(), readyTimeout, c.agents, func(ctx context.Context) bool {
		for _, cl := range c.clients {
			s, err := cl.Status(ctx)
			if err != nil || !s.Ready {
				return false
			}
		}
		return true
	})
	return c, err
}

// sluiceID runs `sluice id --data dir`: it creates the node's key and
// prints its peer id.
func sluiceID(ctx context.Context, bin, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "id", "--data", dir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("sluice id --data %s: %w: %s", dir, err, ee.Stderr)
		}
		return "", fmt.Errorf("sluice id --data %s: %w", dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// writeSecret writes a new random cluster secret in libp2p's swarm key
// format and returns its path.
func writeSecret(path string) (string, error) {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand's contract)
	err := os.WriteFile(path, []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+hex.EncodeToString(key)+"\n"), 0o600)
	return path, err
}

func (c *sluiceCluster) name() string { return "sluice" }

// label names the cluster in progress lines and errors.
func (c *sluiceCluster) label() string {
	if c.nested {
		return "sluice (nested names)"
	}
	return "sluice"
}

// fileTag starts the names of the cluster's logs and profiles: the nested
// cluster's are apart from the flat one's of the same storage.
func (c *sluiceCluster) fileTag() string {
	if c.nested {
		return "sluice-nested"
	}
	return "sluice"
}

// isNested reports whether s is a sluice cluster of nested names.
func isNested(s system) bool {
	c, ok := s.(*sluiceCluster)
	return ok && c.nested
}

// lockers makes n benchmark clients, client i going through agent i%3.
// The agents' Go clients are shared: each is safe for concurrent use and
// keeps a pool of connections to its agent.
func (c *sluiceCluster) lockers(_ context.Context, n int) ([]locker, error) {
	ls := make([]locker, n)
	for i := range ls {
		ls[i] = sluiceLocker{c.clients[i%len(c.clients)]}
	}
	return ls, nil
}

// memory is every agent's resident set.
func (c *sluiceCluster) memory() []memberRSS {
	return rssOf(c.agents)
}

// agentCounters are the agents' counters a run divides by its cycles, by
// their names in the run's PerCycle.
var agentCounters = map[string]string{
	"fsyncs":   "sluice_store_syncs_total",
	"batches":  "sluice_store_submits_total",
	"messages": `sluice_messages_total{direction="out"}`,
	// Reports (a leader's word on a name to a waiting master): most of
	// a contended name's traffic.
	"reports": `sluice_peer_messages_total{kind="report"}`,
	// Writes to other agents' streams: a loop turn's messages to one
	// agent go in one.
	"writes": "sluice_mesh_writes_total",
	// Doorways done in one round (the master knew the name's last
	// ticket and proposed the next number).
	"one_round": "sluice_one_round_doorways_total",
	// The seconds the store's commits took; over the fsyncs (one
	// observation each), a commit's mean time.
	"commit_seconds": "sluice_store_commit_seconds_sum",
	// The agents' processes' CPU (user and system): what a cycle costs
	// the machine, less moved by other load than a rate is.
	"cpu_seconds": "process_cpu_seconds_total",
}

// counters sums agentCounters over the agents, read from each one's
// /metrics on its API socket.
func (c *sluiceCluster) counters(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	for _, sock := range c.socks {
		body, err := scrapeMetrics(ctx, sock)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(body, "\n") {
			for key, series := range agentCounters {
				if v, ok := strings.CutPrefix(line, series+" "); ok {
					f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
					if err != nil {
						return nil, fmt.Errorf("%s: %s: %w", sock, series, err)
					}
					out[key] += f
				}
			}
		}
	}
	return out, nil
}

// scrapeMetrics reads the /metrics text of the agent on the API socket sock.
func scrapeMetrics(ctx context.Context, sock string) (string, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://sluice/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: /metrics answered %s", sock, resp.Status)
	}
	return string(body), nil
}

// saveMetrics writes each agent's /metrics text into c.profileDir, the
// histograms of request phases and store commits that a CPU profile
// cannot show. Failures are reported and do not stop the run.
func (c *sluiceCluster) saveMetrics() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, sock := range c.socks {
		body, err := scrapeMetrics(ctx, sock)
		if err == nil {
			err = os.WriteFile(filepath.Join(c.profileDir, fmt.Sprintf("metrics-%s-%s-n%d.txt", c.fileTag(), c.storage, i+1)), []byte(body), 0o644)
		}
		if err != nil {
			logf("saving the metrics of %s: %v", sock, err)
		}
	}
}

// stop stops the agents with SIGTERM (each writes its profile then) and
// removes the cluster's directory.
func (c *sluiceCluster) stop() {
	if c.profileDir != "" {
		c.saveMetrics()
	}
	for _, cl := range c.clients {
		cl.Close()
	}
	for _, p := range c.agents {
		p.stop()
	}
	if err := os.RemoveAll(c.dir); err != nil {
		logf("removing %s: %v", c.dir, err)
	}
}

// sluiceLocker is one benchmark client of the sluice cluster.
type sluiceLocker struct{ c *client.Client }

// opTimeout is how long a blocking acquire may wait, on both systems:
// far above any wait in these workloads, so that one that runs out shows
// a stuck system as an error rather than hanging the run.
const opTimeout = 10 * time.Second

// leaseDuration outlives every hold of the workloads; nothing renews.
const leaseDuration = 30 * time.Second

func (l sluiceLocker) acquire(ctx context.Context, name string, mode semaphore.Mode, try bool) (release, error) {
	lease, err := l.c.Acquire(ctx, name, mode, client.Options{Try: try, Timeout: opTimeout, Duration: leaseDuration})
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}

// lock takes the exclusive mode `sluice lock` takes by default.
func (l sluiceLocker) lock(ctx context.Context, name string) (release, error) {
	return l.acquire(ctx, name, semaphore.Exclusive, false)
}

// read is a READ_ONLY try: granted at once or refused (timedout, draining),
// given back as a page view through the middleware gives it back: no
// answer awaited (Lease.ReleaseNoWait: with the next call on its
// connection).
func (l sluiceLocker) read(ctx context.Context, name string) (release, error) {
	lease, err := l.c.Acquire(ctx, name, semaphore.ReadOnly, client.Options{Try: true, Timeout: opTimeout, Duration: leaseDuration})
	if err != nil {
		return nil, err
	}
	return lease.ReleaseNoWait, nil
}

// write is READ_WRITE_PRIORITY, the drain's writer: later readers are
// turned away while it waits.
func (l sluiceLocker) write(ctx context.Context, name string) (release, error) {
	return l.acquire(ctx, name, semaphore.ReadWritePriority, false)
}

func (sluiceLocker) abort()       {}
func (sluiceLocker) close() error { return nil }

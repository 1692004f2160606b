package integration

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"cmp"
	"github.com/sluicehq/sluice/semaphore/client"
)

// faultCluster is the fault tests' cluster: n `sluice agent` processes,
// each with its own data directory, all with one cluster secret, on
// loopback or (lab set) each in a network namespace of its own, wired to a
// switch namespace that the test creates. Everything it starts or creates
// goes at the test's end, failed or not.
type faultCluster struct {
	t     *testing.T
	root  string
	psk   string
	nodes []*faultNode
	lab   *netLab
	// extra flags for every agent (a broken build's hidden flag)
	extra []string
	// bin is the agents' binary: the test build's, or a broken one
	// (mutantBinary).
	bin string
}

type faultNode struct {
	i                      int
	data, sock, listen, id string
	p                      *proc
	c                      *http.Client   // raw API calls
	cl                     *client.Client // the Go client
	ns                     string         // network namespace ("": none)
	stopped                bool           // SIGSTOPped
	num                    uint64         // node number as status shows it (0: not asked yet)
	join                   bool           // a new identity that joins (--join), not an initial member
	bin                    string         // this agent's binary ("": the cluster's)
	flags                  []string       // this agent's own flags, after the cluster's
}

// addr is the node's mesh address with its peer id.
func (n *faultNode) addr() string { return n.listen + "/p2p/" + n.id }

// faultSuite runs the fault tests: five agents as processes under kills,
// pauses, partitions, full disks and hostile input, each for seconds. CI
// runs them; a plain go test ./... leaves them out, to stay fast.
var faultSuite = flag.Bool("faults", false, "run the fault suite (five-agent clusters under faults; CI does)")

// newFaultCluster prepares n agents (not started). withLab puts each in a
// network namespace; it needs root and the ip tool, and skips otherwise.
func newFaultCluster(t *testing.T, n int, withLab bool, extra ...string) *faultCluster {
	t.Helper()
	if !*faultSuite && *soak <= 0 {
		t.Skip("the fault suite runs with -faults (CI runs it: .ci/run)")
	}
	c := &faultCluster{t: t, root: shortDir(t), extra: extra}
	c.psk = c.writeSecret("swarm.key")
	if withLab {
		c.lab = newNetLab(t, n)
	}
	for i := range n {
		fn := &faultNode{i: i, data: filepath.Join(c.root, fmt.Sprintf("n%d", i+1)),
			sock: filepath.Join(c.root, fmt.Sprintf("%d.sock", i+1))}
		fn.id = peerID(t, fn.data)
		if c.lab != nil {
			fn.ns = c.lab.ns[i]
			fn.listen = fmt.Sprintf("/ip4/%s/tcp/4001", c.lab.ip[i])
		} else {
			fn.listen = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", freePort(t))
		}
		fn.c = unixClient(fn.sock)
		cl, err := client.New(client.Config{API: fn.sock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		fn.cl = cl
		c.nodes = append(c.nodes, fn)
	}
	return c
}

// writeSecret writes a new random cluster secret under the cluster's root.
func (c *faultCluster) writeSecret(name string) string {
	c.t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		c.t.Fatal(err)
	}
	path := filepath.Join(c.root, name)
	if err := os.WriteFile(path, []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return path
}

// args are node i's agent flags: the initial members, or --join for a
// new identity.
func (c *faultCluster) args(i int) []string {
	n := c.nodes[i]
	var peers, members []string
	for j, o := range c.nodes {
		members = append(members, o.id)
		if j != i {
			peers = append(peers, o.addr())
		}
	}
	args := []string{"agent", "--name", fmt.Sprintf("n%d", i+1), "--data", n.data, "--listen", n.listen,
		"--peers", strings.Join(peers, ","), "--api", n.sock, "--psk-file", c.psk, "--log-level", "warn"}
	if n.join {
		args = append(args, "--join")
	} else {
		args = append(args, "--initial-members", strings.Join(members, ","))
	}
	return append(append(args, c.extra...), n.flags...)
}

// start starts node i from its data directory (again, after a kill).
func (c *faultCluster) start(i int) {
	c.t.Helper()
	n := c.nodes[i]
	args := c.args(i)
	if n.ns != "" {
		// ip netns exec execs the agent: the process is the agent's.
		n.p = startCmd(c.t, "ip", append([]string{"netns", "exec", n.ns, cmp.Or(n.bin, c.bin, binary)}, args...)...)
	} else {
		n.p = startProc(c.t, exec.Command(cmp.Or(n.bin, c.bin, binary), args...))
	}
	n.stopped = false
	n.p.waitLine(c.t, "API on "+n.sock)
}

// newIdentity gives node i, whose data directory was lost, a new
// identity that joins the cluster (the runbook's "start it afresh with
// --join"); it is not started.
func (c *faultCluster) newIdentity(i int) {
	c.t.Helper()
	n := c.nodes[i]
	n.id, n.num, n.join = peerID(c.t, n.data), 0, true
}

// startAll starts every node and waits until all are ready.
func (c *faultCluster) startAll() {
	c.t.Helper()
	for i := range c.nodes {
		c.start(i)
	}
	c.waitReady()
}

// waitReady waits until every running node is LOCK_READY.
func (c *faultCluster) waitReady(which ...int) {
	c.t.Helper()
	if len(which) == 0 {
		which = c.running()
	}
	var cs []*http.Client
	for _, i := range which {
		cs = append(cs, c.nodes[i].c)
	}
	waitReady(c.t, cs...)
}

// running are the nodes whose process is up (stopped ones included).
func (c *faultCluster) running() []int {
	var out []int
	for i, n := range c.nodes {
		if n.p != nil && !n.exited() {
			out = append(out, i)
		}
	}
	return out
}

func (n *faultNode) exited() bool { return n.p.exited() }

// signal sends sig to node i's agent.
func (c *faultCluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	n := c.nodes[i]
	if err := n.p.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %v to node %d: %v", sig, i+1, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		n.stopped = true
	case syscall.SIGCONT:
		n.stopped = false
	case syscall.SIGKILL:
		n.p.wait(c.t)
		n.stopped = false
	}
}

// kill SIGKILLs node i and waits until it is gone.
func (c *faultCluster) kill(i int) { c.signal(i, syscall.SIGKILL) }

// leaders are the nodes (indexes) that lead the view node from sees.
func (c *faultCluster) leaders(from int) []int {
	c.t.Helper()
	st, err := status(c.nodes[from].c)
	if err != nil {
		c.t.Fatal(err)
	}
	var ids []uint64
	view, _ := st["view"].(map[string]any)
	ls, _ := view["leaders"].([]any)
	for _, l := range ls {
		ids = append(ids, parseNode(c.t, l))
	}
	var out []int
	for i := range c.nodes {
		if slices.Contains(ids, c.nodeID(i)) {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		c.t.Fatalf("node %d knows no leaders: %v", from+1, st)
	}
	return out
}

// others are the node indexes not in set.
func (c *faultCluster) others(set ...int) []int {
	var out []int
	for i := range c.nodes {
		if !slices.Contains(set, i) {
			out = append(out, i)
		}
	}
	return out
}

// nodeID is node i's number as status shows it (asked once, kept: it is
// derived from the peer id, which restarts keep).
func (c *faultCluster) nodeID(i int) uint64 {
	c.t.Helper()
	n := c.nodes[i]
	if n.num == 0 {
		st, err := status(n.c)
		if err != nil {
			c.t.Fatalf("status of node %d: %v", i+1, err)
		}
		n.num = parseNode(c.t, st["node"])
	}
	return n.num
}

// parseNode reads a node id as the API spells it: a decimal string.
func parseNode(t *testing.T, v any) uint64 {
	t.Helper()
	s, _ := v.(string)
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("node id %#v is not a decimal string: %v", v, err)
	}
	return id
}

// killAll SIGKILLs every running node and waits until each is gone.
func (c *faultCluster) killAll() {
	c.t.Helper()
	for _, i := range c.running() {
		c.kill(i)
	}
}

// stopAll ends every agent with SIGTERM (SIGCONT first for stopped ones)
// and checks that each exits cleanly.
func (c *faultCluster) stopAll() {
	c.t.Helper()
	for _, i := range c.running() {
		n := c.nodes[i]
		if n.stopped {
			c.signal(i, syscall.SIGCONT)
		}
		stopAgent(c.t, n.p)
	}
}

// startCmd runs a command that runs the binary (ip netns exec), with the
// output handling of start.
func startCmd(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startProc(t, exec.Command(name, args...))
}

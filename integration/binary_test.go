// Package integration tests the real sluice binary: separate processes, real
// sockets, real data directories.
package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/mutation"
)

const bound = 60 * time.Second // every wait below ends by itself within this

var binary string

func TestMain(m *testing.M) {
	if child := os.Getenv("SLUICE_INTERRUPT_CHILD"); child != "" {
		binary = child // TestInterruptedRunLeavesNothing's child uses its parent's build
		undoOnSignal("")
		os.Exit(m.Run())
	}
	for _, what := range sweepDeadRuns() {
		fmt.Fprintln(os.Stderr, "integration: removed what an interrupted run left:", what)
	}
	dir, err := os.MkdirTemp("", "slbin"+runTag()+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	undoOnSignal(dir)
	binary = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", binary, "../cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sluice:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// mutantBinary is sluice built with the mutants (the sluicemutants tag,
// core/mutation): the only build with the hidden --broken flag. It is
// built once, beside the test's own build.
func mutantBinary(t *testing.T) string {
	t.Helper()
	mutantBuild.once.Do(func() {
		path := binary + "-mutants"
		out, err := exec.Command("go", "build", "-tags", mutation.Tag, "-o", path, "../cmd/sluice").CombinedOutput()
		if err != nil {
			mutantBuild.err = fmt.Errorf("go build -tags %s: %v\n%s", mutation.Tag, err, out)
			return
		}
		mutantBuild.path = path
	})
	if mutantBuild.err != nil {
		t.Fatal(mutantBuild.err)
	}
	return mutantBuild.path
}

var mutantBuild struct {
	once sync.Once
	path string
	err  error
}

// shortDir is a temporary directory with a short path: Unix socket paths
// are limited to about 100 bytes.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sl"+runTag()+"-")
	if err != nil {
		t.Fatal(err)
	}
	cleanup(t, func() { os.RemoveAll(dir) })
	return dir
}

type proc struct {
	cmd    *exec.Cmd
	lines  chan string
	output *strings.Builder
	done   chan error
}

// exited reports whether the process has exited (its exit stays on done).
func (p *proc) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// start runs the binary; its stdout and stderr lines arrive on lines.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startProc(t, exec.Command(binary, args...))
}

// startProc runs cmd, with start's handling of its output and its end.
func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &proc{cmd: cmd, lines: make(chan string, 1000), output: &strings.Builder{}, done: make(chan error, 1)}
	dieWithTest(cmd)
	// Wait returns at most this long after the process ended, even while
	// a child it left behind (a lock's command killed with it) still
	// holds its output open: a cleanup must not hang the test binary.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// SLUICE_PROC_LOG_DIR=DIR keeps every process's output there, whole,
	// named by its pid (for debugging: lines is lossy).
	var keep io.Writer = io.Discard
	if dir := os.Getenv("SLUICE_PROC_LOG_DIR"); dir != "" {
		if f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%d.log", cmd.Process.Pid))); err == nil {
			keep = f
			t.Cleanup(func() { f.Close() })
		}
	}
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			fmt.Fprintln(keep, s.Text())
			select {
			case p.lines <- s.Text():
			default: // nobody reads: keep the process unblocked
			}
		}
		close(p.lines)
	}()
	go func() { err := cmd.Wait(); pw.Close(); p.done <- err }()
	cleanup(t, func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// waitLine waits for a line containing s.
func (p *proc) waitLine(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(bound)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("process ended before printing %q; output:\n%s", s, p.output)
			}
			p.output.WriteString(l + "\n")
			if strings.Contains(l, s) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q after %v; output:\n%s", s, bound, p.output)
		}
	}
}

// rest is the output not read by waitLine yet, once the process ended
// (after wait): its lines go to output too.
func (p *proc) rest(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	timeout := time.After(bound)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return b.String()
			}
			p.output.WriteString(l + "\n")
			b.WriteString(l + "\n")
		case <-timeout:
			t.Fatalf("output still open after %v", bound)
		}
	}
}

func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(bound):
		t.Fatalf("process still running after %v", bound)
		return -1
	}
}

func unixClient(sock string) *http.Client {
	return &http.Client{Timeout: bound, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

func post(t *testing.T, c *http.Client, path, body string) (int, map[string]any) {
	t.Helper()
	return postWith(t, c, "http://sluice"+path, nil, body)
}

func status(c *http.Client) (map[string]any, error) {
	resp, err := c.Get("http://sluice/v1/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// TestDev is the README's first command: `sluice dev` starts a 3-node
// cluster, a lock is taken and released through the API on its socket,
// and Ctrl-C stops it cleanly.
func TestDev(t *testing.T) {
	sock := filepath.Join(shortDir(t), "api.sock")
	dev := start(t, "dev", "--api", sock)
	dev.waitLine(t, "API on "+sock)
	dev.waitLine(t, "LOCK_READY")
	c := unixClient(sock)
	code, lease := post(t, c, "/v1/acquire", `{"name":"/site","mode":"read-only"}`)
	if code != 200 || lease["token"] == nil {
		t.Fatalf("acquire: %d %v", code, lease)
	}
	if code, out := post(t, c, "/v1/release", fmt.Sprintf(`{"lease":%q}`, lease["lease"])); code != 200 {
		t.Fatalf("release: %d %v", code, out)
	}
	// A second dev on the same socket is refused, and the first keeps it.
	second := start(t, "dev", "--api", sock)
	if code := second.wait(t); code != 64 {
		t.Fatalf("second dev on a live socket exited %d", code)
	}
	if _, err := status(c); err != nil {
		t.Fatalf("the first dev lost its socket: %v", err)
	}
	if err := dev.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	dev.waitLine(t, "stopping")
	if code := dev.wait(t); code != 0 {
		t.Fatalf("dev exited %d after Ctrl-C", code)
	}
	if _, err := os.Stat(sock); err == nil {
		t.Fatalf("socket %s left behind", sock)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func peerID(t *testing.T, data string) string {
	t.Helper()
	out, err := exec.Command(binary, "id", "--data", data).Output()
	if err != nil {
		t.Fatalf("sluice id: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// agent is one `sluice agent` process of a test cluster, with its data
// directory, API socket and mesh address.
type agent struct {
	data, sock, addr string
	p                *proc
	c                *http.Client
}

// agents prepares n agents under root, all of them bootstrap members.
func agents(t *testing.T, root string, n int) []*agent {
	t.Helper()
	nodes := make([]*agent, n)
	for i := range nodes {
		a := &agent{data: filepath.Join(root, fmt.Sprintf("n%d", i+1))}
		a.sock = filepath.Join(a.data, "api.sock")
		a.addr = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", freePort(t), peerID(t, a.data))
		a.c = unixClient(a.sock)
		nodes[i] = a
	}
	return nodes
}

// run starts agent i of nodes (again, after a kill) from its directory,
// with extra flags.
func run(t *testing.T, nodes []*agent, i int, extra ...string) {
	t.Helper()
	a := nodes[i]
	var peers, members []string
	for j, o := range nodes {
		members = append(members, o.addr[strings.Index(o.addr, "/p2p/")+len("/p2p/"):])
		if j != i {
			peers = append(peers, o.addr)
		}
	}
	listen := a.addr[:strings.Index(a.addr, "/p2p/")]
	a.p = start(t, append([]string{"agent", "--name", fmt.Sprintf("n%d", i+1), "--data", a.data, "--listen", listen,
		"--peers", strings.Join(peers, ","), "--initial-members", strings.Join(members, ","), "--api", a.sock,
		"--log-level", "warn"}, extra...)...)
	a.p.waitLine(t, "API on "+a.sock)
}

func allReady(t *testing.T, nodes []*agent) {
	t.Helper()
	var cs []*http.Client
	for _, n := range nodes {
		cs = append(cs, n.c)
	}
	waitReady(t, cs...)
}

// TestAgentsSurviveKill runs three `sluice agent` processes with data
// directories. A leader is killed with SIGKILL while a lock is held and
// restarted from its directory; the lock is still held, the holder renews
// and releases it, and the next grant has a larger fencing token.
func TestAgentsSurviveKill(t *testing.T) {
	nodes := agents(t, shortDir(t), 3)
	for i := range nodes {
		run(t, nodes, i)
	}
	ready := func() { allReady(t, nodes) }
	ready()
	code, held := post(t, nodes[0].c, "/v1/acquire", `{"name":"/db","duration":"10m"}`)
	if code != 200 {
		t.Fatalf("acquire: %d %v", code, held)
	}
	if err := nodes[1].p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	nodes[1].p.wait(t)
	run(t, nodes, 1)
	ready()
	if code, out := post(t, nodes[2].c, "/v1/acquire", `{"name":"/db","try":true}`); code != 409 {
		t.Fatalf("try on the held lock after a leader's SIGKILL and restart: %d %v", code, out)
	}
	if code, out := post(t, nodes[0].c, "/v1/renew", fmt.Sprintf(`{"lease":%q}`, held["lease"])); code != 200 {
		t.Fatalf("renew: %d %v", code, out)
	}
	if code, out := post(t, nodes[0].c, "/v1/release", fmt.Sprintf(`{"lease":%q}`, held["lease"])); code != 200 {
		t.Fatalf("release: %d %v", code, out)
	}
	code, next := post(t, nodes[2].c, "/v1/acquire", `{"name":"/db","timeout":"30s"}`)
	if code != 200 || next["token"].(float64) <= held["token"].(float64) {
		t.Fatalf("acquire after release: %d %v (held token %v)", code, next, held["token"])
	}
	for _, n := range nodes {
		if err := n.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := n.p.wait(t); code != 0 {
			t.Errorf("agent exited %d after SIGTERM", code)
		}
	}
}

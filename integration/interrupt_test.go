package integration

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// What the tests make outside their own process (agents, directories,
// network namespaces, mounts) carries the test binary's pid in its name,
// and is undone however the run ends:
//   - a test that ends, passed or failed: its Cleanup;
//   - a run interrupted by SIGINT, SIGTERM or SIGHUP, where testing runs
//     no Cleanup: undoOnSignal runs what the running tests registered;
//   - a run that dies at once (SIGKILL, a -timeout panic): its processes
//     die with it (dieWithTest), and the next run sweeps what it left
//     (sweepDeadRuns).

var interrupt = struct {
	sync.Mutex
	next int
	undo map[int]func()
}{undo: map[int]func(){}}

// cleanup runs undo when the test ends, or when the run is interrupted
// before that; once either way.
func cleanup(t *testing.T, undo func()) {
	interrupt.Lock()
	id := interrupt.next
	interrupt.next++
	interrupt.undo[id] = undo
	interrupt.Unlock()
	t.Cleanup(func() { takeUndo(id)() })
}

func takeUndo(id int) func() {
	interrupt.Lock()
	defer interrupt.Unlock()
	f := interrupt.undo[id]
	delete(interrupt.undo, id)
	if f == nil {
		return func() {}
	}
	return f
}

// undoOnSignal undoes, newest first, what the running tests made, and
// exits, when the run is interrupted.
func undoOnSignal(binDir string) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "integration: %v: undoing what the running tests made\n", s)
		interrupt.Lock()
		ids := slices.Sorted(maps.Keys(interrupt.undo))
		interrupt.Unlock()
		for _, id := range slices.Backward(ids) {
			takeUndo(id)()
		}
		os.RemoveAll(binDir)
		os.Exit(2)
	}()
}

// runTag names what this run makes: its pid, which sweepDeadRuns reads.
func runTag() string { return strconv.Itoa(os.Getpid()) }

var (
	runDir  = regexp.MustCompile(`^sl(?:bin)?(\d+)-`)         // shortDir, the binary's directory
	runNS   = regexp.MustCompile(`^sl(?:sw)?(\d+)-[0-9a-f]+`) // netLab's namespaces
	runUser = regexp.MustCompile(`^sl(?:fe|dp|g)(\d+)$`)      // TestRolesOfUnixUsers's users and group
)

// alive reports whether a process pid runs.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// sweepDeadRuns removes what runs that died without their cleanups left:
// the mounts under their directories, the directories, their network
// namespaces. It reports what it removed.
func sweepDeadRuns() []string {
	var swept []string
	dead := func(re *regexp.Regexp, name string) bool {
		m := re.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.Atoi(m[1])
		return err == nil && pid != os.Getpid() && !alive(pid)
	}
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		if !e.IsDir() || !dead(runDir, e.Name()) {
			continue
		}
		dir := filepath.Join(os.TempDir(), e.Name())
		for _, m := range mountsUnder(dir) {
			_ = exec.Command("umount", "-l", m).Run()
		}
		if os.RemoveAll(dir) == nil {
			swept = append(swept, dir)
		}
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && dead(runNS, f[0]) {
				if exec.Command("ip", "netns", "del", f[0]).Run() == nil {
					swept = append(swept, "netns "+f[0])
				}
			}
		}
	}
	// TestRolesOfUnixUsers's users and group.
	for _, db := range []struct{ file, del string }{{"/etc/passwd", "userdel"}, {"/etc/group", "groupdel"}} {
		b, _ := os.ReadFile(db.file)
		for _, line := range strings.Split(string(b), "\n") {
			name, _, _ := strings.Cut(line, ":")
			if dead(runUser, name) && exec.Command(db.del, name).Run() == nil {
				swept = append(swept, db.del+" "+name)
			}
		}
	}
	return swept
}

// mountsUnder lists the mount points under dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 1 && strings.HasPrefix(fields[1], dir+"/") {
			points = append(points, fields[1])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	return points
}

// TestInterruptedRunLeavesNothing runs a test of this package as a child
// (an agent in a directory of its own), interrupts it with SIGINT, then
// kills another with SIGKILL: the first undoes all it made; the second's
// agent dies with it, and its directory goes at the next sweep.
func TestInterruptedRunLeavesNothing(t *testing.T) {
	if os.Getenv("SLUICE_INTERRUPT_CHILD") != "" {
		t.Skip("the child's own run")
	}
	if runtime.GOOS != "linux" {
		t.Skip("only Linux kills a child with its parent (and has /proc)")
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestInterruptChild$", "-test.v")
		cmd.Env = append(os.Environ(), "SLUICE_INTERRUPT_CHILD="+binary)
		p := startProc(t, cmd)
		agent, err := strconv.Atoi(strings.TrimPrefix(p.waitLine(t, "agent pid "), "agent pid "))
		if err != nil {
			t.Fatal(err)
		}
		dir := strings.TrimPrefix(p.waitLine(t, "dir "), "dir ")
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup
		case <-time.After(bound):
			t.Fatalf("the child run did not end %v after %v", bound, sig)
		}
		deadline := time.Now().Add(bound)
		for alive(agent) && !zombie(agent) {
			if time.Now().After(deadline) {
				t.Fatalf("after %v of its test run, agent %d still runs", sig, agent)
			}
			time.Sleep(20 * time.Millisecond) // polling another process's end
		}
		if sig == syscall.SIGKILL {
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("a run killed at once left nothing to sweep? %v", err)
			}
			swept := sweepDeadRuns()
			if !slices.Contains(swept, dir) {
				t.Fatalf("the sweep removed %v, not %s", swept, dir)
			}
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after %v of its test run, %s is still there: %v", sig, dir, err)
		}
		t.Logf("%v: agent %d gone, %s gone", sig, agent, dir)
	}
}

// zombie: pid ended and waits for its parent (a killed child's agent is
// reparented, and reaped by init in its own time).
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && strings.HasPrefix(rest, "Z")
}

// TestInterruptChild is the child of TestInterruptedRunLeavesNothing: it
// starts an agent, says its pid and directory, and waits to be stopped.
func TestInterruptChild(t *testing.T) {
	if os.Getenv("SLUICE_INTERRUPT_CHILD") == "" {
		t.Skip("run by TestInterruptedRunLeavesNothing")
	}
	dir := shortDir(t)
	p := start(t, "dev", "--api", filepath.Join(dir, "api.sock"))
	p.waitLine(t, "API on")
	fmt.Printf("agent pid %d\ndir %s\n", p.cmd.Process.Pid, dir)
	time.Sleep(10 * bound) // until the parent's signal; the parent's wait is bounded
}

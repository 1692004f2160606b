package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopTimeout bounds a process's clean stop after SIGTERM; then it is
// killed. A sluice agent stops within its own 10 s.
const stopTimeout = 15 * time.Second

// process is one server the harness started (a sluice agent or an etcd
// member), with its output kept in a log file in the out directory.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// serverProcs, when positive, is GOMAXPROCS for every Go server
// startProcess starts (-gomaxprocs); run sets it once, before any starts.
var serverProcs int

// startProcess runs bin with args, stdout and stderr to logPath.
func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if serverProcs > 0 { // redis-server ignores it
		cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", serverProcs))
	}
	// A process group of its own: Ctrl-C on the terminal reaches only the
	// harness, which then stops every server with SIGTERM in its order (a
	// profiling agent writes its profile then). Pdeathsig: a harness that
	// is killed outright leaves no server running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM and waits for the exit, killing the process after
// stopTimeout. It is safe to call more than once.
func (p *process) stop() {
	if done, _ := p.exited(); !done {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			logf("%s did not stop within %s after SIGTERM; killing it", p.name, stopTimeout)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	p.log.Close()
}

// rssBytes is the process's resident set (VmRSS of /proc/PID/status).
func (p *process) rssBytes() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: VmRSS %q: %w", p.name, rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s: no VmRSS in /proc/%d/status", p.name, p.cmd.Process.Pid)
}

// logTail is the end of the process's log, for an error message.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return ""
	}
	b = bytes.TrimSpace(b)
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return string(b)
}

// errExited: a server ended while the harness waited for it.
var errExited = errors.New("exited")

// waitFor polls ready every 50 ms until it returns true, the processes
// exit, timeout passes or ctx ends.
func waitFor(ctx context.Context, what string, timeout time.Duration, procs []*process, ready func(context.Context) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, p := range procs {
			if done, err := p.exited(); done {
				return fmt.Errorf("%s: %s %w (%v); its log ends: %s", what, p.name, errExited, err, p.logTail())
			}
		}
		if ready(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not ready after %s: %w", what, timeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. They are
// free when asked; a server takes them a moment later (loopback, no one
// else picks ports here).
func freePorts(n int) ([]int, error) {
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

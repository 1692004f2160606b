package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	osuser "os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/client"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// clientFlags are the flags of every command that talks to an agent.
type clientFlags struct{ api string }

func (f *clientFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.api, "api", "", "the agent's API: a Unix socket path or host:port (default $SLUICE_API, else the per-user socket)")
}

func (f *clientFlags) client() (*client.Client, error) {
	c, err := client.New(client.Config{API: f.api})
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	return c, nil
}

// callTimeout bounds one call of a command to its agent.
const callTimeout = 10 * time.Second

// withAgent runs call with a client of the agent and a context bounded by
// timeout, and closes the client after.
func (f *clientFlags) withAgent(timeout time.Duration, call func(context.Context, *client.Client) error) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return call(ctx, c)
}

// printAnswer prints an agent's answer as indented JSON, or as text.
func printAnswer[T any](w io.Writer, asJSON bool, v T, text func(io.Writer, T)) error {
	if asJSON {
		return printJSON(w, v)
	}
	text(w, v)
	return nil
}

// apiError maps a client error to the documented exit code, in one line
// that says what failed once: the client's own prefixes ("client: acquire
// /x: ...") and the transport's ("Get http://sluice/...: dial unix ...")
// are the command's to drop.
func apiError(what string, err error) error {
	msg := plainError(err)
	switch {
	case errors.Is(err, semaphore.ErrTimedOut), errors.Is(err, semaphore.ErrDraining), errors.Is(err, semaphore.ErrOverflow):
		return &exitError{code: ExitNotObtained, msg: fmt.Sprintf("%s: not obtained: %s", what, msg)}
	case errors.Is(err, semaphore.ErrInvalid):
		return &usageError{err: &saidError{msg: what + ": " + msg, err: err}}
	case errors.Is(err, semaphore.ErrUnavailable), errors.Is(err, semaphore.ErrNotReady):
		return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("%s: %s", what, msg)}
	case errors.Is(err, semaphore.ErrForbidden):
		return &exitError{code: ExitNoPerm, msg: fmt.Sprintf("%s: %s", what, msg)}
	}
	return &saidError{msg: what + ": " + msg, err: err}
}

// saidError is err said in msg: its text, with err's chain for errors.Is.
type saidError struct {
	msg string
	err error
}

func (e *saidError) Error() string { return e.msg }
func (e *saidError) Unwrap() error { return e.err }

// plainError is err without the client's and the transport's wrapping: the
// agent's code and message, or what stopped the call and where.
func plainError(err error) string {
	var ae *client.APIError
	var op *net.OpError
	switch {
	case errors.As(err, &ae):
		// The agent's message is written for people and begins with
		// what failed ("invalid request: ...").
		return cmp.Or(ae.Message, ae.Code, "error")
	case errors.As(err, &op):
		where := ""
		if op.Addr != nil {
			where = " at " + op.Addr.String()
		}
		return fmt.Sprintf("agent unavailable%s: %v (is `sluice agent` running? see --api)", where, op.Err)
	case errors.Is(err, context.DeadlineExceeded):
		return "the agent did not answer in time"
	}
	return err.Error()
}

// splitCommand takes NAME before "--" and CMD ARGS after it.
func splitCommand(cmd *cobra.Command, args []string) (string, []string, error) {
	names, argv, err := splitNames(cmd, args, 1)
	if err != nil {
		return "", nil, err
	}
	return names[0], argv, nil
}

// splitNames splits args at -- into the names before it (1 to most) and
// the command after it.
func splitNames(cmd *cobra.Command, args []string, most int) ([]string, []string, error) {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0:
		return nil, nil, usageErrorf("%s: missing -- before the command (%s NAME -- CMD ARGS...)", cmd.Name(), cmd.Name())
	case most == 1 && dash != 1:
		return nil, nil, usageErrorf("%s: one NAME before --, got %d", cmd.Name(), dash)
	case dash == 0:
		return nil, nil, usageErrorf("%s: no NAME before --", cmd.Name())
	case dash > most:
		return nil, nil, usageErrorf("%s: at most %d names before --, got %d", cmd.Name(), most, dash)
	case len(args) == dash:
		return nil, nil, usageErrorf("%s: no command after --", cmd.Name())
	}
	return args[:dash], args[dash:], nil
}

// check runs the agent's own check of a request (daemon.Request.Validate)
// on the flags, so that a request the agent would refuse is a usage error
// before any call, even with no agent to call.
func (f *lockFlags) check(cmd *cobra.Command, name string, mode semaphore.Mode) error {
	r := daemon.Request{Name: name, Mode: mode, Timeout: f.timeout, Duration: f.duration, Quiet: f.quiet, Try: f.try, Limit: f.limit}
	if err := r.Validate(); err != nil {
		return usageErrorf("%s: %v", cmd.Name(), err)
	}
	if f.limit > 0 && mode != semaphore.ReadOnly {
		return usageErrorf("%s: --limit counts readers: it needs --mode read-only", cmd.Name())
	}
	if f.duration < time.Second {
		// Renewed at half its remaining time while CMD runs: shorter
		// leases are renewals and nothing else.
		return usageErrorf("%s: --duration %s is under 1s", cmd.Name(), f.duration)
	}
	return nil
}

type lockFlags struct {
	clientFlags
	mode                             string
	timeout, duration, quiet, killIn time.Duration
	grace, eta, escalate             time.Duration
	reason, previewURL               string
	try, reopen, preview             bool
	limit                            int
}

// addLease adds the flags lock and drain share.
func (f *lockFlags) addLease(cmd *cobra.Command, timeout time.Duration, timeoutHelp string) {
	fl := cmd.Flags()
	fl.DurationVar(&f.timeout, "timeout", timeout, timeoutHelp)
	fl.DurationVar(&f.duration, "duration", time.Minute, "lease length; renewed while CMD runs")
	fl.DurationVar(&f.quiet, "quiet", 0, "quiet period without readers, for read-write-gentle (default 10m)")
	fl.DurationVar(&f.killIn, "kill-after", 10*time.Second, "after the lease is lost, SIGKILL CMD this long after SIGTERM")
}

func newLockCmd() *cobra.Command {
	var f lockFlags
	cmd := &cobra.Command{
		Use:   "lock NAME [NAME...] [flags] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock",
		Long: "Take the lock NAME, run CMD while holding it (renewing it), release it.\n" +
			"CMD gets the fencing token in SLUICE_TOKEN and the name in SLUICE_LOCK.\n" +
			"Several names are taken together, all or nothing (in byte order, so two\n" +
			"such commands never wait for each other in a cycle); CMD then also gets\n" +
			"SLUICE_LOCKS (how many) and SLUICE_LOCK_1, SLUICE_TOKEN_1... in that order,\n" +
			"and it is stopped if any of them is lost.\n" +
			"If the lease is lost, CMD gets SIGTERM, and SIGKILL after --kill-after.\n" +
			"A restart of the agent loses nothing: the lease is renewed through the\n" +
			"restarted agent, as long as it is back before the lease's time is up.\n" +
			"Signals reach CMD once: without a terminal CMD has a process group of\n" +
			"its own, to which SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on; on a\n" +
			"terminal its keys reach CMD directly. A hang-up ends CMD (SIGKILL after\n" +
			"--kill-after) and releases the lock.\n" +
			"Exit status: CMD's own; 76 when the lease was lost while CMD ran; 75\n" +
			"when the lock was not obtained; 69 when the agent is unreachable or not\n" +
			"ready; 64 on bad usage.",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			names, argv, err := splitNames(cmd, args, api.MaxNames)
			if err != nil {
				return err
			}
			mode, err := semaphore.ParseMode(f.mode)
			if err != nil {
				return usageErrorf("lock: --mode: %s", strings.TrimPrefix(err.Error(), semaphore.ErrInvalid.Error()+": "))
			}
			for i, name := range names {
				if err := f.check(cmd, name, mode); err != nil {
					return err
				}
				if slices.Contains(names[:i], name) {
					return usageErrorf("lock: %s is named twice", name)
				}
			}
			o := client.Options{Timeout: f.timeout, Duration: f.duration, Quiet: f.quiet, Try: f.try, Limit: f.limit, AutoRenew: true}
			if len(names) > 1 {
				return runLockedAll(cmd, &f.clientFlags, names, mode, o, f.killIn, argv)
			}
			return runLocked(cmd, &f.clientFlags, names[0], mode, o, f.killIn, argv, nil)
		},
	}
	fl := cmd.Flags()
	f.add(cmd)
	fl.StringVar(&f.mode, "mode", "exclusive", "read-only, read-write-priority, read-write, read-write-gentle or exclusive")
	f.addLease(cmd, 30*time.Second, "how long to wait for the lock")
	fl.BoolVar(&f.try, "try", false, "do not wait: exit 75 if the lock is taken (a writer's try waits up to a second for agents' idle shared read tickets to go)")
	fl.IntVar(&f.limit, "limit", 0, "with --mode read-only: a counting semaphore, at most N holders of NAME at once (0: no limit)")
	return cmd
}

// owner is what `sluice lock` says of itself to the operators' tables:
// user@host, pid and the command line, cut to the API's 256 bytes.
func owner(argv []string) string {
	s := fmt.Sprintf("%s pid %d: %s", user(), os.Getpid(), strings.Join(argv, " "))
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	for len(s) > 256 {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// drainPlan is what a drain adds to a lock's run.
type drainPlan struct {
	// waiting is called while the acquire waits (progress, the grace's
	// revocation) and stopped once it returns.
	waiting func(ctx context.Context, c *client.Client)
	// keepOnFailure: a failed CMD leaves the name held.
	keepOnFailure bool
	// escalateAfter: acquireEscalating's.
	escalateAfter time.Duration
	// previewToken, previewURL: the preview's, told once granted and
	// passed to CMD.
	previewToken, previewURL string
}

// runLocked acquires, runs argv under the lease and releases; d, for a
// drain, says what more to do.
func runLocked(cmd *cobra.Command, cf *clientFlags, name string, mode semaphore.Mode, o client.Options,
	killIn time.Duration, argv []string, d *drainPlan) error {
	if d == nil {
		d = &drainPlan{}
	}
	waiting := d.waiting
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	progressDone := make(chan struct{})
	progressCtx, stopProgress := context.WithCancel(ctx)
	go func() {
		defer close(progressDone)
		if waiting != nil {
			waiting(progressCtx, c)
		}
	}()
	asked := time.Now()
	o.Owner = owner(argv)
	lease, err := acquireEscalating(ctx, c, cmd.ErrOrStderr(), name, mode, o, d.escalateAfter)
	stopProgress()
	<-progressDone
	if err == nil && waiting != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "draining %s: granted after %s (token %d): running %s\n", name,
			time.Since(asked).Round(time.Millisecond), lease.Token(), strings.Join(argv, " "))
	}
	verb := "lock"
	if waiting != nil {
		verb = "drain"
	}
	if err != nil {
		return notObtained(ctx, c, verb, name, err)
	}
	var env []string
	if d.previewToken != "" {
		env = append(env, "SLUICE_PREVIEW_TOKEN="+d.previewToken)
		if d.previewURL != "" {
			env = append(env, "SLUICE_PREVIEW_URL="+d.previewURL)
			fmt.Fprintf(cmd.ErrOrStderr(), "draining %s: preview it before visitors return: %s\n", name, d.previewURL)
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "draining %s: preview it before visitors return: add ?%s=%s to one of its URLs\n",
				name, client.PreviewQuery, d.previewToken)
		}
	}
	stop() // from here on, signals go to CMD, which decides
	env = append(env, "SLUICE_TOKEN="+strconv.FormatUint(lease.Token(), 10), "SLUICE_LOCK="+name)
	code, lost, runErr := runUnder(cmd, heldOne(lease), name, argv, killIn, env)
	if d.keepOnFailure && runErr == nil && !lost && code != 0 {
		// A failed maintenance job leaves the site drained: the lease is
		// not given back, and lasts until `sluice undrain` (or its
		// duration, which a kept drain takes long).
		fmt.Fprintf(cmd.ErrOrStderr(), "sluice: drain %s: the command exited %d; %s stays drained (lease %s, token %d) "+
			"until `sluice undrain %s`, or until the lease ends by itself at %s\n", name, code, name, lease.ID(), lease.Token(), name,
			lease.Expires().Format("2006-01-02 15:04:05 MST"))
		return &exitError{code: code}
	}
	relCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lease.Release(relCtx); err != nil && lease.Err() == nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "sluice: lock %s: %v (the lease ends by itself at its expiry)\n", name, err)
	}
	switch {
	case runErr != nil:
		return runErr
	case lost:
		return &exitError{code: ExitLost, msg: fmt.Sprintf("lock %s was lost while the command ran (it exited %d)", name, code)}
	case code != 0:
		return &exitError{code: code}
	}
	return nil
}

// notObtained is the exit of a lock or drain of name that was not
// obtained (err).
func notObtained(ctx context.Context, c *client.Client, verb, name string, err error) error {
	if ctx.Err() != nil {
		return &exitError{code: ExitNotObtained, msg: fmt.Sprintf("%s %s: interrupted while waiting", verb, name)}
	}
	if errors.Is(err, semaphore.ErrNotReady) {
		return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("%s %s: the agent is not ready: %s", verb, name, plainError(err))}
	}
	if errors.Is(err, semaphore.ErrLost) {
		// Dropped while it waited: an operator's unlock --force --all.
		return &exitError{code: ExitNotObtained, msg: fmt.Sprintf("%s %s: not obtained: the request was force-unlocked while it waited", verb, name)}
	}
	if errors.Is(err, semaphore.ErrTimedOut) {
		// An agent that lost readiness only after the request ended
		// answers timedout: the cluster had no lock service, nobody
		// held the name, and that is "not ready" (69) too.
		stCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, serr := c.Status(stCtx)
		cancel()
		if serr == nil && !st.Ready {
			return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("%s %s: the agent is not ready (%s)", verb, name, st.Reason)}
		}
		if held := holdersOf(c, name); held != "" {
			return &exitError{code: ExitNotObtained, msg: fmt.Sprintf("%s %s: not obtained: %s; %s", verb, name, plainError(err), held)}
		}
	}
	return apiError(verb+" "+name, err)
}

// maxHoldersSaid bounds the holders a refusal names (a site's readers
// are many: they are counted instead).
const maxHoldersSaid = 3

// holdersOf says who holds name now, as `sluice locks` shows it, for a
// lock that was not obtained: "held by ..." with each holder's request,
// mode, token, node and owner, or "" when the table cannot be read or
// shows no holder (the holder let go meanwhile, or several names).
func holdersOf(c *client.Client, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t, err := c.Locks(ctx, name)
	if err != nil {
		return ""
	}
	var said []string
	readers := 0
	for _, l := range t.Locks {
		if l.Name != name {
			continue
		}
		readers = l.ReadersHolding()
		for _, e := range l.Entries {
			if !e.Holder || e.Mode == "read-only" || e.Mode == "intent-shared" {
				continue
			}
			if len(said) == maxHoldersSaid {
				said = append(said, "...")
				break
			}
			who := fmt.Sprintf("%s (%s, token %d, node %s)", e.Request, e.Mode, e.Ticket, cmp.Or(e.NodeName, e.Node))
			if e.Owner != "" {
				who += ": " + e.Owner
			}
			said = append(said, who)
		}
	}
	if readers > 0 {
		said = append(said, fmt.Sprintf("%d reader(s)", readers))
	}
	if len(said) == 0 {
		return ""
	}
	return "held by " + strings.Join(said, ", ")
}

// runLockedAll is runLocked for several names, taken together.
func runLockedAll(cmd *cobra.Command, cf *clientFlags, names []string, mode semaphore.Mode, o client.Options,
	killIn time.Duration, argv []string) error {
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.Owner = owner(argv)
	what := strings.Join(names, " ")
	leases, err := c.AcquireAll(ctx, names, mode, o)
	if err != nil {
		return notObtained(ctx, c, "lock", what, err)
	}
	env := []string{"SLUICE_LOCKS=" + strconv.Itoa(len(leases)),
		"SLUICE_TOKEN=" + strconv.FormatUint(leases[0].Token(), 10), "SLUICE_LOCK=" + leases[0].Name()}
	for i, l := range leases {
		env = append(env, fmt.Sprintf("SLUICE_LOCK_%d=%s", i+1, l.Name()), fmt.Sprintf("SLUICE_TOKEN_%d=%d", i+1, l.Token()))
	}
	stop() // from here on, signals go to CMD, which decides
	h, unwatch := heldAll(leases)
	code, lost, runErr := runUnder(cmd, h, what, argv, killIn, env)
	unwatch()
	relCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range leases {
		if err := l.Release(relCtx); err != nil && l.Err() == nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "sluice: lock %s: %v (the lease ends by itself at its expiry)\n", l.Name(), err)
		}
	}
	switch {
	case runErr != nil:
		return runErr
	case lost:
		return &exitError{code: ExitLost, msg: fmt.Sprintf("lock %s was lost while the command ran (it exited %d)", what, code)}
	case code != 0:
		return &exitError{code: code}
	}
	return nil
}

// held is what runUnder watches: done closes when a lease ends, and err
// says whether it was lost (nil: released).
type held struct {
	done <-chan struct{}
	err  func() error
}

func heldOne(l *client.Lease) held { return held{done: l.Done(), err: l.Err} }

// heldAll watches several leases: done closes when the first ends, err is
// the first loss among them. unwatch ends the watch.
func heldAll(ls []*client.Lease) (h held, unwatch func()) {
	done, quit := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			select {
			case <-l.Done():
				once.Do(func() { close(done) })
			case <-quit:
			}
		})
	}
	lost := func() error {
		for _, l := range ls {
			if err := l.Err(); err != nil {
				return fmt.Errorf("%s: %w", l.Name(), err)
			}
		}
		return nil
	}
	return held{done: done, err: lost}, func() { close(quit); wg.Wait() }
}

// acquireEscalating acquires name in mode; a soft or gentle drain not
// granted within after (0: never) gives its request up and asks again as
// a hard one (READ_WRITE_PRIORITY: new readers are turned away), within
// what is left of o.Timeout.
func acquireEscalating(ctx context.Context, c *client.Client, out io.Writer, name string, mode semaphore.Mode,
	o client.Options, after time.Duration) (*client.Lease, error) {
	if after <= 0 || mode == semaphore.ReadWritePriority || o.Try || after >= o.Timeout {
		return c.Acquire(ctx, name, mode, o)
	}
	soft, cancel := context.WithTimeout(ctx, after)
	l, err := c.Acquire(soft, name, mode, o)
	cancel()
	if err == nil || ctx.Err() != nil || soft.Err() == nil {
		return l, err
	}
	fmt.Fprintf(out, "draining %s: not granted after %s: turning hard (new readers are turned away)\n", name, after)
	o.Timeout -= after
	return c.Acquire(ctx, name, semaphore.ReadWritePriority, o)
}

// runUnder runs argv with the lease's token in its environment, and stops
// it if the lease is lost. It returns CMD's exit status (128+signal when a
// signal ended it) and whether the lease was lost while it ran.
//
// Signals reach CMD once. Without a terminal, CMD runs in a process group
// of its own, and SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to sluice go on
// to that group. On a terminal, CMD stays in the foreground group, where
// the terminal's own signals (Ctrl-C, Ctrl-\, a hang-up) reach it
// directly: only SIGTERM is passed on. A hang-up (an ssh session gone)
// also ends CMD, by SIGKILL after killIn if it outlives it: it must not
// go on without its lock, which sluice releases once CMD is gone.
func runUnder(cmd *cobra.Command, lease held, name string, argv []string, killIn time.Duration, env []string) (code int, lost bool, err error) {
	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
	child.Env = append(os.Environ(), env...)
	tty := isTTY(os.Stdin)
	if !tty {
		child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := child.Start(); err != nil {
		return 0, false, &exitError{code: 127, msg: fmt.Sprintf("lock %s: %v", name, err)}
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	var kill <-chan time.Time
	done := lease.done
	for {
		select {
		case s := <-sigs:
			switch {
			case !tty:
				_ = syscall.Kill(-child.Process.Pid, s.(syscall.Signal)) // its group: its own children too
			case s == syscall.SIGTERM:
				_ = child.Process.Signal(s)
			}
			if s == syscall.SIGHUP && kill == nil {
				kill = time.After(killIn)
			}
		case <-done:
			done = nil
			if err := lease.err(); err != nil {
				lost = true
				fmt.Fprintf(cmd.ErrOrStderr(), "sluice: lock %s lost (%v): stopping the command\n", name, plainError(err))
				_ = child.Process.Signal(syscall.SIGTERM)
				kill = time.After(killIn)
			}
		case <-kill:
			_ = child.Process.Kill()
		case err := <-exited:
			var ee *exec.ExitError
			switch {
			case err == nil:
				return 0, lost, nil
			case errors.As(err, &ee):
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal()), lost, nil
				}
				return ee.ExitCode(), lost, nil
			}
			return 0, lost, fmt.Errorf("lock %s: %w", name, err)
		}
	}
}

// isTTY reports whether f is a terminal (not merely a character device,
// as /dev/null is).
func isTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// keptDrain is a drain's lease unless --reopen-on-failure: it outlives a
// failed or killed job by this much, unless undrained.
const keptDrain = 720 * time.Hour

var drainModes = map[string]semaphore.Mode{
	"hard": semaphore.ReadWritePriority, "soft": semaphore.ReadWrite, "gentle": semaphore.ReadWriteGentle,
}

func newDrainCmd() *cobra.Command {
	var f lockFlags
	cmd := &cobra.Command{
		Use:   "drain NAME [flags] -- CMD [ARGS...]",
		Short: "Drain the readers of NAME, then run a command (site maintenance)",
		Long: "Take NAME as a writer and run CMD once it is granted; show progress while\n" +
			"the readers drain. Modes: hard (READ_WRITE_PRIORITY: new readers get\n" +
			"\"draining\" at once, CMD runs when the current ones are done), soft\n" +
			"(READ_WRITE: readers keep coming; CMD runs when none is left), gentle\n" +
			"(READ_WRITE_GENTLE: soft, and a --quiet period without readers).\n" +
			"Exit status as for lock.\n\n" +
			"A drain whose CMD fails keeps NAME drained: visitors keep the\n" +
			"maintenance page until `sluice undrain NAME`, as a maintenance flag\n" +
			"file would, rather than meet a half-done upgrade. So does a drain whose\n" +
			"sluice is killed. Its lease therefore lasts --duration 720h (renewed\n" +
			"while CMD runs). --reopen-on-failure gives NAME back whatever CMD's\n" +
			"status (and a --duration of 1m).",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv, err := splitCommand(cmd, args)
			if err != nil {
				return err
			}
			mode, ok := drainModes[f.mode]
			if !ok {
				return usageErrorf("--mode %q is not hard, soft or gentle", f.mode)
			}
			if f.grace < 0 || f.grace > 0 && f.grace < 100*time.Millisecond {
				return usageErrorf("drain: --grace must be 0 (wait for the readers) or at least 100ms, got %s", f.grace)
			}
			if f.escalate < 0 || f.escalate > 0 && mode == semaphore.ReadWritePriority {
				return usageErrorf("drain: --escalate-after is for soft and gentle drains, at least 0, got %s with --mode %s", f.escalate, f.mode)
			}
			if f.eta < 0 {
				return usageErrorf("drain: --eta must not be negative, got %s", f.eta)
			}
			if len(f.reason) > 256 || !utf8.ValidString(f.reason) || strings.IndexFunc(f.reason, unicode.IsControl) >= 0 {
				return usageErrorf("drain: --reason: at most 256 bytes of UTF-8 without control characters (got %d bytes)", len(f.reason))
			}
			if err := f.check(cmd, name, mode); err != nil {
				return err
			}
			out := cmd.ErrOrStderr()
			quiet := time.Duration(0)
			if mode == semaphore.ReadWriteGentle {
				quiet = cmp.Or(f.quiet, semaphore.DefaultQuiet)
			}
			progress := func(ctx context.Context, c *client.Client) { showDrain(ctx, c, out, name, f.mode, quiet, f.grace) }
			if f.grace > 0 {
				show := progress
				progress = func(ctx context.Context, c *client.Client) {
					done := make(chan struct{})
					go func() {
						defer close(done)
						revokeAfter(ctx, c, out, name, f.grace)
					}()
					show(ctx, c)
					<-done
				}
			}
			if f.try {
				progress = func(context.Context, *client.Client) {} // nothing to wait for
			}
			duration := f.duration
			if !f.reopen && !cmd.Flags().Changed("duration") {
				duration = keptDrain
			}
			plan := &drainPlan{waiting: progress, keepOnFailure: !f.reopen, escalateAfter: f.escalate}
			o := client.Options{Timeout: f.timeout, Duration: duration, Quiet: f.quiet, Try: f.try, AutoRenew: true,
				Reason: f.reason, ETA: f.eta, ReadersGrace: f.grace}
			if f.preview {
				token, hash, err := client.NewPreviewToken()
				if err != nil {
					return err
				}
				plan.previewToken, o.Preview = token, hash
				if plan.previewURL, err = previewLink(cmp.Or(f.previewURL, name), token); err != nil && f.previewURL != "" {
					return usageErrorf("drain: --preview-url: %v", err)
				}
			}
			return runLocked(cmd, &f.clientFlags, name, mode, o, f.killIn, argv, plan)
		},
	}
	fl := cmd.Flags()
	f.add(cmd)
	fl.StringVar(&f.mode, "mode", "hard", "hard, soft or gentle")
	fl.StringVar(&f.reason, "reason", "", "why the site is drained, shown to visitors (the maintenance page of the middleware and sluice proxy) and operators: at most 256 bytes of UTF-8 without control characters (longer or with them: refused)")
	fl.DurationVar(&f.eta, "eta", 0, "how long the maintenance is expected to take: visitors see when, and Retry-After follows it")
	fl.DurationVar(&f.escalate, "escalate-after", 0, "a soft or gentle drain not granted after this long turns hard: it asks again as READ_WRITE_PRIORITY, and new readers are turned away (0: never)")
	fl.DurationVar(&f.grace, "grace", 0, "how long the readers holding NAME may go on once the drain waits: then their leases are revoked (requests behind the middleware or sluice proxy are cut) and CMD runs (0: wait for them)")
	fl.BoolVar(&f.preview, "preview", true, "once granted, print a preview link: requests that carry its token (a cookie it sets) pass the maintenance page of the middleware and sluice proxy while the drain holds; CMD gets it in SLUICE_PREVIEW_TOKEN and SLUICE_PREVIEW_URL")
	fl.StringVar(&f.previewURL, "preview-url", "", "the site's URL for the preview link (default: NAME, when it is an http(s) URL)")
	fl.BoolVar(&f.reopen, "reopen-on-failure", false, "give NAME back when CMD fails (default: NAME stays drained until sluice undrain NAME)")
	fl.BoolVar(&f.try, "try", false, "do not wait: exit 75 unless NAME has no reader or writer now (it waits up to a second for agents' idle shared read tickets to go, and a reader that leaves within it lets the drain in)")
	f.addLease(cmd, 10*time.Minute, "how long to wait for the readers to drain")
	// A drain's lease outlives a failed CMD unless --reopen-on-failure:
	// say so where the flag's default is shown.
	d := fl.Lookup("duration")
	d.DefValue = keptDrain.String()
	d.Usage = "lease length; renewed while CMD runs (1m with --reopen-on-failure)"
	return cmd
}

// previewLink is site's URL with the preview token in its query: site
// must be an absolute http or https URL.
func previewLink(site, token string) (string, error) {
	u, err := url.Parse(site)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("%q is not an http:// or https:// URL with a host", site)
	}
	q := u.Query()
	q.Set(client.PreviewQuery, token)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// revokeAfter revokes the readers of name once grace is over, unless
// ctx ends first (the drain was granted): a bounded drain.
func revokeAfter(ctx context.Context, c *client.Client, out io.Writer, name string, grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	// The grant may come while the revocation is answered: the call runs
	// on, and says what it did.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	cut, err := c.RevokeReaders(rctx, name, owner(nil))
	switch {
	case err != nil:
		fmt.Fprintf(out, "draining %s: the grace of %s is over, but revoking its readers failed: %s\n", name, grace, plainError(err))
	default:
		fmt.Fprintf(out, "draining %s: the grace of %s is over: readers revoked: %d (on %d requests)\n", name, grace, cut.Readers, len(cut.Released))
	}
}

// showDrain reports, until ctx ends, how many readers are left on name
// and below it: a live line on a terminal, a plain line every few seconds
// otherwise.
func showDrain(ctx context.Context, c *client.Client, out io.Writer, name, mode string, quiet, grace time.Duration) {
	tty := isTerminal(out)
	start := time.Now()
	lastReader := start // when readers were last seen: a gentle drain's quiet period runs from there
	// The table is read every 200 ms. A terminal's line is redrawn each
	// time; a log gets a line when the readers left change, and every 2 s.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastLeft, lastPrint := "", time.Time{}
	report := func() {
		left := drainLeft{name: name, readers: -1}
		if tab, err := c.Locks(ctx, name); err == nil {
			left = drainReaders(tab, name)
		}
		if ctx.Err() != nil {
			return // granted (or given up) meanwhile: the table said nothing
		}
		readers := left.readers
		if readers != 0 {
			lastReader = time.Now()
		}
		shown := left.String()
		if !tty && shown == lastLeft && time.Since(lastPrint) < 2*time.Second {
			return
		}
		lastLeft, lastPrint = shown, time.Now()
		line := drainLine(name, mode, left, time.Since(start))
		if grace > 0 && readers != 0 {
			line += fmt.Sprintf("; grace: %s of %s left, then they are revoked", max(grace-time.Since(start), 0).Round(time.Second), grace)
		}
		if quiet > 0 && readers == 0 {
			// As this agent saw it: the leaders count from the last reader
			// they saw, which may be a little earlier.
			line += fmt.Sprintf("; quiet period: %s of %s to go", max(quiet-time.Since(lastReader), 0).Round(time.Second), quiet)
		}
		if tty {
			fmt.Fprintf(out, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(out, line)
		}
	}
	report()
	for {
		select {
		case <-ctx.Done():
			if tty {
				fmt.Fprintln(out)
			}
			return
		case <-tick.C:
			report()
		}
	}
}

// drainLine is the drain's progress line, before its grace and quiet
// period: "draining /site (hard): 7 readers left (/site/shop 5, /site/blog
// 2), waiting 3s".
func drainLine(name, mode string, left drainLeft, waited time.Duration) string {
	return fmt.Sprintf("draining %s (%s): %s, waiting %s", name, mode, left, waited.Round(time.Second))
}

// drainLeft is what a drain of a name waits for, as the cluster's table
// shows it: the readers holding the name, and those holding names below
// it (through their intent-shared tickets on it), which it waits for too.
type drainLeft struct {
	name    string
	readers int // in all; -1 when the agent had no table to tell
	self    int // those of the name itself
	// below counts, by each level directly below the name, the readers
	// at or below that level.
	below map[string]int
}

// canonicalName is name as an agent of nested names keeps it
// (semaphore.NamePath), or name when it is none.
func canonicalName(name string) string {
	if path, err := semaphore.NamePath(name); err == nil {
		return path[len(path)-1]
	}
	return name
}

// drainReaders reads tab, the table of the names starting with name, for
// a drain of name. The levels below it are NamePath's, so /site/shopping
// is not under /site/shop.
func drainReaders(tab api.Table, name string) drainLeft {
	if !tab.Leader && len(tab.MergedFrom) == 0 {
		return drainLeft{name: name, readers: -1} // only this agent's requests: no table
	}
	left := drainLeft{name: name, below: map[string]int{}}
	parent := name
	if path, err := semaphore.NamePath(name); err == nil {
		parent = path[len(path)-1]
	}
	for _, l := range tab.Locks {
		if l.Name == name || l.Name == parent {
			left.self += l.ReadersHolding()
			left.readers += readersAtOrBelow(l)
			continue
		}
		if path, err := semaphore.NamePath(l.Name); err == nil && len(path) > 1 && path[len(path)-2] == parent {
			left.below[path[len(path)-1]] += readersAtOrBelow(l)
		}
	}
	return left
}

// readersAtOrBelow counts the readers holding l's name (ReadersHolding)
// and those holding names below it: on an intent-shared ticket, the
// readers its agent said (one when it did not), or one for a reader's
// ticket of its own.
func readersAtOrBelow(l api.Lock) int { return l.ReadersHolding() + l.ReadersBelowHolding() }

// String is the count for the progress line, with the levels below the
// name that have readers: "7 readers left (/site/shop 5, /site/blog 2)".
func (d drainLeft) String() string {
	if d.readers < 0 {
		return "unknown readers left"
	}
	s := fmt.Sprintf("%d readers left", d.readers)
	listed, more := readersBy(d.below)
	if len(listed) == 0 {
		return s
	}
	if d.self > 0 {
		listed = append(listed, fmt.Sprintf("%s itself %d", tableName(d.name), d.self))
	}
	if more != "" {
		listed = append(listed, more)
	}
	return s + " (" + strings.Join(listed, ", ") + ")"
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// user is who runs this command, for the agent's log of force-unlocks.
func user() string {
	u := os.Getenv("USER")
	if u == "" { // cron, systemd units and sudo -E may not set it
		if cur, err := osuser.Current(); err == nil {
			u = cur.Username
		} else {
			u = strconv.Itoa(os.Getuid())
		}
	}
	h, _ := os.Hostname()
	return strings.TrimSpace(u + "@" + h)
}

func newUndrainCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "undrain NAME",
		Short: "Reopen NAME after a drain whose command failed: give back the writers' leases that hold it",
		Long: "Release the leases of the writers that hold NAME (a drain whose CMD\n" +
			"failed keeps it so; see drain), so visitors are served again. A drain\n" +
			"still running loses its lock (its CMD gets SIGTERM). The agent lets the\n" +
			"user that drained, or an operator, do it. Exits 1 when no writer holds NAME.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			return f.withAgent(callTimeout, func(ctx context.Context, c *client.Client) error {
				tab, err := c.Locks(ctx, name)
				if err != nil {
					return apiError("undrain "+name, err)
				}
				released := 0
				for _, l := range tab.Locks {
					for _, e := range l.Entries {
						// The writers of the name, as given or as an agent
						// of nested names keeps it; not its readers, nor the
						// intent tickets of the names below it.
						if l.Name != name && l.Name != canonicalName(name) || !e.Holder || e.Mode == semaphore.ReadOnly.String() ||
							e.Mode == semaphore.IntentShared.String() || e.Mode == semaphore.IntentExclusive.String() {
							continue
						}
						if err := c.ReleaseID(ctx, e.Request, l.Name); err != nil {
							return apiError("undrain "+name, err)
						}
						released++
						fmt.Fprintf(cmd.OutOrStdout(), "undrained %s: released the %s lease %s (token %d)\n", name, e.Mode,
							e.Request, e.Ticket)
					}
				}
				if released == 0 {
					return &exitError{code: ExitFailure, msg: fmt.Sprintf("undrain %s: no writer holds it", name)}
				}
				return nil
			})
		},
	}
	f.add(cmd)
	return cmd
}

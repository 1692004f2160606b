package cli

import (
	"cmp"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/semaphore"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes of the sluice binary. They follow sysexits(3) so that scripts
// can tell a mistake in the invocation from a cluster that is not there and
// from a lock that is held by someone else.
const (
	// ExitOK means the command did what it was asked to do.
	ExitOK = 0

	// ExitFailure is any failure that has no more specific code below.
	ExitFailure = 1

	// ExitUsage (EX_USAGE) means the command was invoked wrongly: an
	// unknown command or flag, a malformed flag value or bad arguments.
	// Retrying the same invocation will fail the same way.
	ExitUsage = 64

	// ExitUnavailable (EX_UNAVAILABLE) means the service is not reachable
	// or not ready (no agent, no quorum, not built yet). Retrying later
	// may succeed.
	ExitUnavailable = 69

	// ExitNotObtained (EX_TEMPFAIL) means the lock was not obtained, for
	// example because it is held in a conflicting mode and the wait timed
	// out. Retrying later may succeed.
	ExitNotObtained = 75

	// ExitLost (EX_PROTOCOL) means `sluice lock` lost its lease while the
	// command ran (expired unrenewed, or force-unlocked): the command was
	// stopped, and whatever it did after the loss was not under the lock.
	ExitLost = 76

	// ExitNoPerm (EX_NOPERM) means the agent refused the call: the
	// caller's role (--role on the agent) does not allow it on that name.
	ExitNoPerm = 77
)

// version, when set with -ldflags "-X
// github.com/sluicehq/sluice/cmd/internal/cli.version=...", is the
// release's name; otherwise versionString reads the build's own record.
var version = ""

// versionString is what `sluice version` and `sluice --version` print
// after "sluice ": the release (semaphore.Version), the wire codecs it
// speaks, the module's version when it is a tag (`go install ...@v1.2.3`),
// the commit and its time from the build's VCS stamp (with "+dirty" for
// uncommitted changes), and Go's.
func versionString() string {
	v := fmt.Sprintf("%s (codecs %d to %d)", cmp.Or(version, semaphore.Version), semaphore.MinCodec, semaphore.Codec)
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v + " (no build information)"
	}
	if m := info.Main.Version; m != "" && m != "(devel)" {
		v += " module " + m
	}
	var rev, at, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += fmt.Sprintf(" commit %.12s%s %s", rev, dirty, at)
	}
	return v + " " + info.GoVersion
}

// usageError marks an error as a mistake in the invocation; run maps it to
// ExitUsage.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error {
	return &usageError{err: fmt.Errorf(format, a...)}
}

// exitError carries a specific exit code. If msg is empty the command has
// already told the user what happened and run prints nothing more.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.msg
}

// Execute runs the sluice command line on os.Args and returns the process
// exit code.
func Execute() int {
	return run(os.Args[1:], os.Stdout, os.Stderr)
}

// run executes the command line args (without the program name), writing
// to stdout and stderr, and returns the exit code. Errors are printed as a
// single line "sluice: <msg>" on stderr.
func run(args []string, stdout, stderr io.Writer) int {
	if args == nil {
		// cobra falls back to os.Args when given nil.
		args = []string{}
	}
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)

	_, err := root.ExecuteC()
	if err == nil {
		return ExitOK
	}

	code := ExitFailure
	var ee *exitError
	var ue *usageError
	switch {
	case errors.As(err, &ee):
		code = ee.code
		if ee.msg == "" {
			return code
		}
	case errors.As(err, &ue):
		code = ExitUsage
	}
	fmt.Fprintf(stderr, "sluice: %s\n", oneLine(err.Error()))
	return code
}

// oneLine folds a multi-line message into a single line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "Cluster-wide reader/writer semaphores on named objects",
		Long: "sluice is a cluster-wide reader/writer semaphore service: agents on\n" +
			"every machine form a mesh, elect leaders and grant locks on named\n" +
			"objects (usually URLs).",
		SilenceUsage:               true,
		SilenceErrors:              true,
		SuggestionsMinimumDistance: 2,
		// Args and RunE make the root runnable so that an unknown command
		// reaches Args (and becomes a usage error) instead of cobra's own
		// untyped "unknown command" error.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf(" (did you mean %q?)", s[0])
			}
			return &usageError{err: errors.New(msg)}
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf("no command given; see 'sluice --help'")
		},
	}
	root.Version = versionString()
	root.SetVersionTemplate("sluice {{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErrorf("%v (see '%s --help')", err, cmd.CommandPath())
	})
	root.AddCommand(newAgentCmd(), newDevCmd(), newProxyCmd(), newIDCmd(), newLockCmd(), newDrainCmd(), newUndrainCmd(), newStatusCmd(), newLocksCmd(),
		newUnlockCmd(), newVersionCmd())
	root.AddCommand(newMembersCmd())
	return root
}

// exactArgs is cobra.ExactArgs(n) reported as a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return &usageError{err: err}
		}
		return nil
	}
}

// noArgs is cobra.NoArgs reported as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return &usageError{err: err}
	}
	return nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of sluice",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "sluice %s\n", versionString())
			return err
		},
	}
}

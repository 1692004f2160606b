package mutation

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Tag is the build tag that builds the mutants in.
const Tag = "sluicemutants"

var (
	mu    sync.Mutex
	noted = map[string]bool{}
)

// Need says whether the mutants are built in; when they are not, it notes
// t's top-level test for Main to run again in a build that has them.
func Need(t testing.TB) bool {
	t.Helper()
	if Built {
		return true
	}
	top, _, _ := strings.Cut(t.Name(), "/")
	mu.Lock()
	noted[top] = true
	mu.Unlock()
	return false
}

// childWait bounds the child run of the noted tests.
const childWait = 20 * time.Minute

// Main runs m's tests and then, in a build without the mutants, the tests
// Need noted, in a child `go test -tags sluicemutants` of the package in
// the working directory (the package's own, under go test). It returns
// the exit code for os.Exit.
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	names := make([]string, 0, len(noted))
	for n := range noted {
		names = append(names, regexp.QuoteMeta(n))
	}
	mu.Unlock()
	if code != 0 || Built || len(names) == 0 {
		return code
	}
	if raceBuild {
		// Under the race detector the package ran for its races: the
		// noted tests run in the plain run, not again here.
		fmt.Fprintf(os.Stderr, "mutation: %d tests that need the mutants run in the plain run (-tags %s), not under -race\n", len(names), Tag)
		return code
	}
	slices.Sort(names)
	ctx, cancel := context.WithTimeout(context.Background(), childWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-tags", Tag, "-count=1", "-run", "^("+strings.Join(names, "|")+")$", ".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mutation: the tests that need the mutants failed under -tags %s: %v\n%s", Tag, err, out)
		return 1
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "mutation: %d tests that need the mutants passed under -tags %s:\n%s", len(names), Tag, out)
	}
	return 0
}

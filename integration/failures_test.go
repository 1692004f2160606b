package integration

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore"
)

// goNames are the failures' Go names, as the manual gives them.
var goNames = map[string]error{
	"semaphore.ErrTimedOut": semaphore.ErrTimedOut, "semaphore.ErrDraining": semaphore.ErrDraining,
	"semaphore.ErrNotReady": semaphore.ErrNotReady, "semaphore.ErrInvalid": semaphore.ErrInvalid,
	"semaphore.ErrUnknownLease": semaphore.ErrUnknownLease, "semaphore.ErrOverflow": semaphore.ErrOverflow,
	"semaphore.ErrLost": semaphore.ErrLost, "semaphore.ErrUnauthorized": semaphore.ErrUnauthorized,
	"semaphore.ErrForbidden": semaphore.ErrForbidden, "semaphore.ErrConflict": semaphore.ErrConflict,
	"semaphore.ErrChangeTimedOut": semaphore.ErrChangeTimedOut, "semaphore.ErrUnavailable": semaphore.ErrUnavailable,
}

// TestManualNamesEveryFailure: every failure of the table the agent
// answers from has a row in the manual's table of codes, whose Go name is
// a sentinel of package semaphore that the failure is (errors.Is); and no
// failure's message begins with a Go package's prefix, since people read
// it as it is.
func TestManualNamesEveryFailure(t *testing.T) {
	manual := docs(t)
	rowOf := regexp.MustCompile("(?m)^\\| (`[a-z_]+`(?:, `[a-z_]+`)*) \\| [^|]+ \\| `(semaphore\\.Err[A-Za-z]+)` \\|")
	named := map[string]string{}
	for _, m := range rowOf.FindAllStringSubmatch(manual, -1) {
		for _, c := range strings.Split(m[1], ", ") {
			named[strings.Trim(c, "`")] = m[2]
		}
	}
	packages := regexp.MustCompile(`^(core|codes|wire|daemon|client|semaphore|api|election|p2p|store): `)
	for _, r := range codes.Rows() {
		name, ok := named[r.Code]
		if !ok {
			t.Errorf("code %q has no row with a Go name in the manual", r.Code)
			continue
		}
		sentinel, ok := goNames[name]
		if !ok || !errors.Is(r.Err, sentinel) {
			t.Errorf("code %q: the manual's %s is not a sentinel it is", r.Code, name)
		}
		if packages.MatchString(r.Err.Error()) {
			t.Errorf("code %q: message %q begins with a package's prefix", r.Code, r.Err)
		}
	}
	if len(named) != len(codes.Rows()) {
		t.Errorf("the manual names %d codes, the table has %d", len(named), len(codes.Rows()))
	}
}

// TestReleaseBinaryHasNoMutants: the binary as `go build ./cmd/sluice`
// makes it has no --broken flag and none of the broken builds' names (a
// string search of the file; core's TestMutantsCompiledOut shows the
// core's mutant branches do nothing there). With -faults, where the
// mutants' build is made anyway, the same search finds them in it.
func TestReleaseBinaryHasNoMutants(t *testing.T) {
	names := [][]byte{[]byte("quorum-of-one"), []byte("not-durable")}
	search := func(path string) (found []string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if bytes.Contains(b, n) {
				found = append(found, string(n))
			}
		}
		return found
	}
	if found := search(binary); len(found) > 0 {
		t.Errorf("the release binary holds the broken builds' names %v", found)
	}
	code, _, errs := sluice(t, "", "agent", "--in-memory", "--broken", "quorum-of-one")
	if code == 0 || !strings.Contains(errs, "unknown flag: --broken") {
		t.Errorf("agent --broken: exit %d %q, want an unknown flag", code, errs)
	}
	if *faultSuite {
		if found := search(mutantBinary(t)); len(found) != len(names) {
			t.Errorf("the mutants' build holds only %v of %q: the search cannot find them", found, names)
		}
	}
}

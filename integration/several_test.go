package integration

import (
	"regexp"
	"strings"
	"testing"
)

// TestLockSeveral: `sluice lock` takes several names together, all or
// nothing, and hands CMD each name and token in the order taken.
func TestLockSeveral(t *testing.T) {
	sock := startDev(t)
	code, out, errs := sluice(t, sock, "lock", "/b", "/a", "--", "sh", "-c",
		`echo "$SLUICE_LOCKS $SLUICE_LOCK_1=$SLUICE_TOKEN_1 $SLUICE_LOCK_2=$SLUICE_TOKEN_2 $SLUICE_LOCK=$SLUICE_TOKEN"`)
	if code != 0 || !regexp.MustCompile(`^2 /a=[1-9][0-9]* /b=[1-9][0-9]* /a=[1-9][0-9]*\n$`).MatchString(out) {
		t.Fatalf("lock /b /a: %d %q %q", code, out, errs)
	}
	// /b held by another: a try of /a and /b fails naming /b, and holds
	// nothing (/a is free at once).
	held := start(t, "lock", "--api", sock, "/b", "--", "sh", "-c", "echo holding; sleep 60")
	held.waitLine(t, "holding")
	code, out, errs = sluice(t, sock, "lock", "--try", "/a", "/b", "--", "true")
	if code != 75 || !strings.Contains(errs, "/b: ") {
		t.Fatalf("lock --try /a /b with /b held: %d %q %q, want 75 naming /b", code, out, errs)
	}
	if code, out, errs := sluice(t, sock, "lock", "--try", "/a", "--", "true"); code != 0 {
		t.Fatalf("/a after the failed lock of /a /b: %d %q %q", code, out, errs)
	}
	for _, args := range [][]string{{"/a", "/a"}, {"/a", ""}} {
		if code, _, errs := sluice(t, sock, append(append([]string{"lock"}, args...), "--", "true")...); code != 64 {
			t.Errorf("lock %q: %d %q, want 64", args, code, errs)
		}
	}
}

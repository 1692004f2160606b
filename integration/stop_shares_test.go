package integration

import (
	"testing"
)

// TestStopLetsSharesGo: an agent stopped gracefully (SIGTERM) first lets
// its shared read tickets go. Its page view on /site left an idle share
// that the leaders would keep for --share-lease (an hour here); a drain
// through another agent must be granted within its obtain timeout (20s)
// all the same.
func TestStopLetsSharesGo(t *testing.T) {
	nodes := agents(t, shortDir(t), 3)
	for i := range nodes {
		run(t, nodes, i, "--share-lease", "1h")
	}
	allReady(t, nodes)
	if code, out, errs := sluice(t, nodes[2].sock, "lock", "--mode", "read-only", "/site", "--", "true"); code != 0 {
		t.Fatalf("page view through agent 3: %d %q %q", code, out, errs)
	}
	code, out, errs := sluice(t, nodes[0].sock, "locks", "/site")
	if code != 0 {
		t.Fatalf("locks: %d %q %q", code, out, errs)
	}
	t.Logf("the leaders' table before agent 3 stops:\n%s", out)
	stopAgent(t, nodes[2].p)
	if code, out, errs := sluice(t, nodes[0].sock, "lock", "--mode", "read-write-priority", "--timeout", "20s", "/site", "--", "true"); code != 0 {
		t.Fatalf("drain after agent 3 stopped: %d %q %q (its share was not let go)", code, out, errs)
	}
}

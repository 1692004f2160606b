package core_test

import (
	"os"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicehq/sluice/core"
)

// TestFenceScenarioCatchesMutant replays handoff_fences_old_leaders.txt on
// a core whose old leaders do not fence: the master still in the old view
// is then granted too, and two nodes hold the lock. The checked-in
// expectation must therefore not hold for the mutant.
func TestFenceScenarioCatchesMutant(t *testing.T) {
	script, err := os.ReadFile("testdata/handoff_fences_old_leaders.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mutant core.Mutant
		grants int
	}{{0, 1}, {core.MutantNoFence, 2}} {
		h := &harness{mutant: c.mutant}
		var out strings.Builder
		for _, block := range strings.Split(string(script), "\n\n") {
			line := ""
			for _, l := range strings.Split(block, "\n") {
				if l != "" && !strings.HasPrefix(l, "#") && l != "----" {
					line = l
					break
				}
			}
			if line == "" {
				continue
			}
			cmd, args, err := datadriven.ParseLine(line)
			if err != nil {
				t.Fatal(err)
			}
			out.WriteString(h.run(t, &datadriven.TestData{Cmd: cmd, CmdArgs: args}))
		}
		if got := strings.Count(out.String(), ": granted "); got != c.grants {
			t.Errorf("mutant %d: %d grants of name a, want %d:\n%s", c.mutant, got, c.grants, out.String())
		}
	}
}

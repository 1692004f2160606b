package core_test

import (
	"strings"
	"testing"
	"github.com/sluicehq/sluice/core"
)

func TestExploreDebug(t *testing.T) {
	o := withTrace(exploreWorld(12694))
	o.mutant = core.MutantIgnoreChoosing
	f, tr := explore(t, o)
	t.Logf("%s\n%s", f, strings.Join(tr, "\n"))
}

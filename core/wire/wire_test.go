package wire_test

import (
	"testing"

	"github.com/sluicehq/sluice/core/wire"
)

// TestModeTraits pins the one table of the modes' traits.
func TestModeTraits(t *testing.T) {
	for _, c := range []struct {
		m                    wire.Mode
		shared, writer, soft bool
	}{
		{wire.ModeExclusive, false, true, false},
		{wire.ModeReadOnly, true, false, false},
		{wire.ModeReadWritePriority, false, true, false},
		{wire.ModeReadWrite, false, true, true},
		{wire.ModeReadWriteGentle, false, true, true},
		{0, false, false, false},
		{99, false, false, false},
	} {
		if c.m.Shared() != c.shared || c.m.Writer() != c.writer || c.m.Soft() != c.soft {
			t.Errorf("%s: shared %v writer %v soft %v, want %v %v %v", c.m, c.m.Shared(), c.m.Writer(), c.m.Soft(), c.shared, c.writer, c.soft)
		}
	}
}

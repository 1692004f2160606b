package wire_test

import (
	"testing"

	"github.com/sluicehq/sluice/core/wire"
)

// TestModeTraits pins the one table of the modes' traits.
func TestModeTraits(t *testing.T) {
	for _, c := range []struct {
		m                            wire.Mode
		shared, writer, soft, intent bool
	}{
		{wire.ModeExclusive, false, true, false, false},
		{wire.ModeReadOnly, true, false, false, false},
		{wire.ModeReadWritePriority, false, true, false, false},
		{wire.ModeReadWrite, false, true, true, false},
		{wire.ModeReadWriteGentle, false, true, true, false},
		{wire.ModeIntentShared, true, false, false, true},
		{wire.ModeIntentExclusive, false, false, false, true},
		{0, false, false, false, false},
		{99, false, false, false, false},
	} {
		if c.m.Shared() != c.shared || c.m.Writer() != c.writer || c.m.Soft() != c.soft || c.m.Intent() != c.intent {
			t.Errorf("%s: shared %v writer %v soft %v intent %v, want %v %v %v %v", c.m, c.m.Shared(), c.m.Writer(), c.m.Soft(),
				c.m.Intent(), c.shared, c.writer, c.soft, c.intent)
		}
		if c.m.Valid() && c.m.Reader() == c.writer {
			t.Errorf("%s: reader %v, writer %v", c.m, c.m.Reader(), c.writer)
		}
	}
}

// TestConflicts pins multiple granularity locking's table: IS, IX, RO and
// writers (W), symmetric.
func TestConflicts(t *testing.T) {
	is, ix, ro := wire.ModeIntentShared, wire.ModeIntentExclusive, wire.ModeReadOnly
	writers := []wire.Mode{wire.ModeExclusive, wire.ModeReadWritePriority, wire.ModeReadWrite, wire.ModeReadWriteGentle}
	compatible := map[[2]wire.Mode]bool{{is, is}: true, {is, ix}: true, {is, ro}: true, {ix, ix}: true, {ro, ro}: true}
	all := append([]wire.Mode{is, ix, ro}, writers...)
	for _, a := range all {
		for _, b := range all {
			want := !compatible[[2]wire.Mode{a, b}] && !compatible[[2]wire.Mode{b, a}]
			if got := wire.Conflicts(a, b); got != want {
				t.Errorf("Conflicts(%s, %s) = %v, want %v", a, b, got, want)
			}
		}
	}
	for _, m := range writers {
		if m.IntentOf() != ix {
			t.Errorf("the parents of %s are held in %s", m, m.IntentOf())
		}
	}
	if ro.IntentOf() != is || is.IntentOf() != is || ix.IntentOf() != ix {
		t.Error("a reader's parents are held in intent-shared, a writer's in intent-exclusive")
	}
}

func TestRequestIDString(t *testing.T) {
	for _, c := range []struct {
		id   wire.RequestID
		want string
	}{
		{wire.RequestID{Node: 4, Seq: 1<<32 | 1}, "4.1.1"},
		{wire.RequestID{}, "0.0.0"},
		{wire.RequestID{Node: wire.NodeID(^uint64(0)), Seq: ^uint64(0)}, "18446744073709551615.4294967295.4294967295"},
	} {
		if got := c.id.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.id, got, c.want)
		}
	}
}

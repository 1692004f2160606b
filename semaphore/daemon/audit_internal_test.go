package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The operator's page keeps the last auditLogLen notes, newest first, in
// a ring that a busy lock loop fills many times over.
func TestAuditKeepsTheLastNotes(t *testing.T) {
	n := &Node{log: slog.New(slog.DiscardHandler)}
	if notes := n.Audit(); notes == nil || len(notes) != 0 {
		t.Fatalf("an empty log: %#v, want an empty list", notes)
	}
	ctx := context.Background()
	for i := range 3 {
		n.audit(ctx, "write_lock", fmt.Sprintf("/n%d", i), nil, "", "")
	}
	if notes := n.Audit(); len(notes) != 3 || notes[0].Name != "/n2" || notes[2].Name != "/n0" {
		t.Fatalf("three notes: %+v", notes)
	}
	const total = 3*auditLogLen + 7
	for i := 3; i < total; i++ {
		n.audit(ctx, "write_lock", fmt.Sprintf("/n%d", i), nil, "", "")
	}
	notes := n.Audit()
	if len(notes) != auditLogLen {
		t.Fatalf("%d notes kept, want %d", len(notes), auditLogLen)
	}
	for i, note := range notes {
		if want := fmt.Sprintf("/n%d", total-1-i); note.Name != want {
			t.Fatalf("note %d is %s, want %s", i, note.Name, want)
		}
	}
}

// A lock loop's write locks write at most auditBurst audit lines at once,
// then auditLinesPerSecond; the next line says how many were left out.
// Every note is kept, and operators' actions are always written.
func TestAuditBoundsWriteLockLines(t *testing.T) {
	var out strings.Builder
	var now time.Duration
	n := &Node{log: slog.New(slog.NewTextHandler(&out, nil)), cfg: NodeConfig{Clock: func() time.Duration { return now }}}
	ctx := context.Background()
	lines := func() []string {
		s := strings.Split(strings.TrimSpace(out.String()), "\n")
		out.Reset()
		if len(s) == 1 && s[0] == "" {
			return nil
		}
		return s
	}
	const loop = 3 * auditBurst
	for i := range loop {
		n.audit(ctx, "write_lock", fmt.Sprintf("/n%d", i), nil, "", "")
	}
	if got := lines(); len(got) != auditBurst {
		t.Fatalf("%d lines for %d write locks at once, want %d", len(got), loop, auditBurst)
	}
	if notes := n.Audit(); len(notes) != auditLogLen || notes[0].Name != fmt.Sprintf("/n%d", loop-1) {
		t.Fatalf("the notes: %d, newest %q", len(notes), notes[0].Name)
	}
	n.audit(ctx, "force_unlock", "/site", nil, "", "")
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "action=force_unlock") || strings.Contains(got[0], "left_out") {
		t.Fatalf("an operator's action: %q", got)
	}
	// A second later, 20 lines more; the first says what was left out.
	now += time.Second
	for i := range 2 * auditLinesPerSecond {
		n.audit(ctx, "write_lock_released", fmt.Sprintf("/n%d", i), nil, "", "")
	}
	got := lines()
	if len(got) != auditLinesPerSecond || !strings.Contains(got[0], fmt.Sprintf("left_out=%d", loop-auditBurst)) ||
		strings.Contains(got[1], "left_out") {
		t.Fatalf("a second later: %d lines, first %q", len(got), got[0])
	}
	// A quiet minute refills the burst, no more.
	now += time.Minute
	for range 2 * auditBurst {
		n.audit(ctx, "write_lock", "/site", nil, "", "")
	}
	if got := lines(); len(got) != auditBurst || !strings.Contains(got[0], fmt.Sprintf("left_out=%d", auditLinesPerSecond)) {
		t.Fatalf("after a quiet minute: %d lines", len(got))
	}
}

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
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

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
)

// gatedHandler records the messages' "name" attributes, and holds every
// write until open is closed: a log on a slow disk or a stalled pipe.
type gatedHandler struct {
	open  chan struct{}
	mu    sync.Mutex
	names []string
}

func (h *gatedHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *gatedHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *gatedHandler) WithGroup(string) slog.Handler            { return h }
func (h *gatedHandler) Handle(_ context.Context, r slog.Record) error {
	<-h.open
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "name" {
			h.mu.Lock()
			h.names = append(h.names, a.Value.String())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

// An audited call does not wait for its log line: with the log stalled,
// the calls return and the page shows the last notes, newest first; once
// the log moves, every line is written, in order, and flush waits for
// them. More lines than the queue holds make the calls wait, and none is
// lost.
func TestAuditLinesDoNotHoldTheCall(t *testing.T) {
	h := &gatedHandler{open: make(chan struct{})}
	n := &Node{log: slog.New(h)}
	n.audits.written.L = &n.audits.mu
	ctx := context.Background()
	for i := range 60 {
		n.audit(ctx, "write_lock", fmt.Sprintf("/n%d", i), nil, "", "")
	}
	notes := n.Audit()
	if len(notes) != auditLogLen || notes[0].Name != "/n59" || notes[auditLogLen-1].Name != "/n10" {
		t.Fatalf("the page: %d notes, first %q, last %q; want %d from /n59 to /n10",
			len(notes), notes[0].Name, notes[len(notes)-1].Name, auditLogLen)
	}
	const more = auditQueueLen + 100
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range more {
			n.audit(ctx, "write_lock", fmt.Sprintf("/m%d", i), nil, "", "")
		}
	}()
	close(h.open)
	<-done
	n.audits.flush()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.names) != 60+more {
		t.Fatalf("%d lines written, want %d", len(h.names), 60+more)
	}
	for i, name := range h.names {
		want := fmt.Sprintf("/n%d", i)
		if i >= 60 {
			want = fmt.Sprintf("/m%d", i-60)
		}
		if name != want {
			t.Fatalf("line %d is %s, want %s", i, name, want)
		}
	}
}

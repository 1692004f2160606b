package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore"
)

// AuditNote is one operator's action through this agent, or one write
// lock (a drain, a deploy's lock) taken or given back: who did it as the
// kernel or a token says, never as the request says.
type AuditNote struct {
	At      time.Time `json:"at"`
	Action  string    `json:"action"`
	Name    string    `json:"name,omitempty"`
	Outcome string    `json:"outcome"`
	// By is the caller (uid, user and pid, or a token's file); Command its
	// command line, read from /proc when the action was taken.
	By      string `json:"by"`
	Command string `json:"command,omitempty"`
	// Said is what the request said of its sender ("by", "owner"), for
	// what it is worth.
	Said   string `json:"said,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Node is the agent the action went through, in a cluster's list
	// (ClusterAudit).
	Node string `json:"node,omitempty"`
}

// auditLog keeps the last notes, in a ring: a busy lock loop's audit
// must not copy the whole log at every note.
type auditLog struct {
	mu    sync.Mutex
	notes [auditLogLen]AuditNote
	next  int // where the next note goes
	count int // notes kept, up to auditLogLen

	// The write locks' lines: budget lines may go out now (up to
	// auditBurst), as of budgetAt on the node's Clock; leftOut were not
	// written since the last that was.
	budget   float64
	budgetAt time.Duration
	started  bool
	leftOut  int
}

const auditLogLen = 50

// An application's lock loop takes thousands of write locks a second,
// two audit lines each: the write locks' lines are bounded to a burst of
// auditBurst, then auditLinesPerSecond, and the next line written after
// some were left out says how many (left_out). Every note still goes to
// the ring, and operators' actions are always written.
const (
	auditBurst          = 100
	auditLinesPerSecond = 20
)

// line says whether a write lock's line may be written at now, and how
// many were left out before it.
func (a *auditLog) line(now time.Duration) (bool, int) {
	if !a.started {
		a.started, a.budget, a.budgetAt = true, auditBurst, now
	}
	if now > a.budgetAt {
		a.budget = min(auditBurst, a.budget+(now-a.budgetAt).Seconds()*auditLinesPerSecond)
		a.budgetAt = now
	}
	if a.budget < 1 {
		a.leftOut++
		return false, 0
	}
	a.budget--
	left := a.leftOut
	a.leftOut = 0
	return true, left
}

// audit logs one action of ctx's caller as one structured line, and keeps
// it for the operator's page. err is the action's outcome.
func (n *Node) audit(ctx context.Context, action, name string, err error, said, detail string) {
	note := AuditNote{At: time.Now(), Action: action, Name: name, Outcome: "ok", By: "this process", Said: said,
		Detail: detail}
	if err != nil {
		note.Outcome = codes.Of(err).Code
	}
	c, known := callerFrom(ctx)
	if known {
		note.By = c.describe()
		if c.Cred {
			note.Command = c.commandLine()
		}
	}
	write, leftOut := true, 0
	a := &n.audits
	a.mu.Lock()
	a.notes[a.next] = note
	a.next, a.count = (a.next+1)%auditLogLen, min(a.count+1, auditLogLen)
	if clock := n.cfg.Clock; clock != nil && (action == "write_lock" || action == "write_lock_released") {
		write, leftOut = a.line(clock())
	}
	a.mu.Unlock()
	if !write {
		return
	}
	attrs := []any{"action", action, "name", name, "outcome", note.Outcome}
	if known {
		if c.Cred {
			attrs = append(attrs, "uid", c.UID, "pid", c.PID, "command", note.Command)
		} else {
			attrs = append(attrs, "token", c.Token)
		}
	}
	attrs = append(attrs, "by", note.By)
	if said != "" {
		attrs = append(attrs, "said", said)
	}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	if leftOut > 0 {
		attrs = append(attrs, "left_out", leftOut)
	}
	n.log.Warn("audit", attrs...)
}

// Audit is the last audit notes, newest first.
func (n *Node) Audit() []AuditNote {
	a := &n.audits
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]AuditNote, 0, a.count)
	for i := 1; i <= a.count; i++ {
		out = append(out, a.notes[(a.next-i+auditLogLen)%auditLogLen])
	}
	return out
}

// commandLine is a process's command line, spaces between its words, at
// most 512 bytes ("" when /proc does not say: gone, or another system).
func commandLine(pid int32) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\x00")
	b = bytes.ReplaceAll(b, []byte{0}, []byte{' '})
	if len(b) > 512 {
		b = append(b[:509], "..."...)
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// KeptLock is a write lock this agent holds for a process that is gone:
// a drain whose job failed (sluice drain keeps the site drained then) or
// was killed. It blocks its name until someone undrains it.
type KeptLock struct {
	Name   string    `json:"name"`
	Lease  string    `json:"lease"`
	Mode   string    `json:"mode"`
	Owner  string    `json:"owner,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	PID    int32     `json:"pid"`
}

// KeptLocks lists the write locks held for processes that are gone (the
// kernel named the caller that took them; its pid no longer runs).
func (n *Node) KeptLocks(ctx context.Context) ([]KeptLock, error) {
	var held []KeptLock
	err := n.run(ctx, func() error {
		for h, l := range n.leases {
			if l.held && l.req.Mode != semaphore.ReadOnly && l.req.by != nil && l.req.by.Cred {
				held = append(held, KeptLock{Name: l.req.Name, Lease: h.String(), Mode: l.req.Mode.String(),
					Owner: l.req.Owner, Reason: l.req.Reason, Since: l.granted, PID: l.req.by.PID})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Off the loop: /proc is the disk's business.
	kept := held[:0]
	for _, k := range held {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", k.PID)); errors.Is(err, os.ErrNotExist) {
			kept = append(kept, k)
		}
	}
	slices.SortFunc(kept, func(a, b KeptLock) int { return a.Since.Compare(b.Since) })
	return kept, nil
}

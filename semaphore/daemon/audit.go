package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/codes"
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

// auditLog keeps the last notes.
type auditLog struct {
	mu    sync.Mutex
	notes []AuditNote
}

const auditLogLen = 50

// audit logs one action of ctx's caller as one structured line, and keeps
// it for the operator's page. err is the action's outcome.
func (n *Node) audit(ctx context.Context, action, name string, err error, said, detail string) {
	note := AuditNote{At: time.Now(), Action: action, Name: name, Outcome: "ok", By: "this process", Said: said,
		Detail: detail}
	if err != nil {
		note.Outcome = codes.Of(err).Code
	}
	attrs := []any{"action", action, "name", name, "outcome", note.Outcome}
	if c, ok := callerFrom(ctx); ok {
		note.By = c.String()
		if c.Cred {
			note.Command = commandLine(c.PID)
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
	n.log.Warn("audit", attrs...)
	n.audits.mu.Lock()
	defer n.audits.mu.Unlock()
	n.audits.notes = append(n.audits.notes, note)
	if len(n.audits.notes) > auditLogLen {
		n.audits.notes = slices.Clone(n.audits.notes[len(n.audits.notes)-auditLogLen:])
	}
}

// Audit is the last audit notes, newest first.
func (n *Node) Audit() []AuditNote {
	n.audits.mu.Lock()
	defer n.audits.mu.Unlock()
	out := slices.Clone(n.audits.notes)
	slices.Reverse(out)
	if out == nil {
		out = []AuditNote{}
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

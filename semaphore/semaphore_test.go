package semaphore_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
)

// reference says, from the definition, whether a request may go in: no
// earlier ticket conflicts with it, where two tickets conflict unless both
// are readers.
func reference(me core.Candidate, others []wire.Entry) (grant, conflict bool) {
	for _, o := range others {
		earlier := o.Ticket < me.Ticket || o.Ticket == me.Ticket && o.Req.Compare(me.Req) < 0
		bothRead := me.Mode == semaphore.ReadOnly && o.Mode == semaphore.ReadOnly
		if earlier && !bothRead {
			return false, true
		}
	}
	return true, false
}

// TestAdmitAgainstReference compares Admit with the reference over every
// combination of up to four other tickets in the supported modes, around a
// candidate of each mode, tried or waiting.
func TestAdmitAgainstReference(t *testing.T) {
	modes := []wire.Mode{semaphore.ReadOnly, semaphore.ReadWritePriority, semaphore.Exclusive}
	checked := 0
	var others []wire.Entry
	var rec func(k int)
	rec = func(k int) {
		for _, mm := range modes {
			for _, try := range []bool{false, true} {
				me := core.Candidate{Req: wire.RequestID{Node: 9, Seq: 3}, Ticket: 3, Mode: mm, Try: try}
				d := semaphore.Admit(me, others)
				grant, _ := reference(me, others)
				checked++
				switch {
				case grant && !d.Grant:
					t.Fatalf("%+v among %+v: want grant, got %+v", me, others, d)
				case !grant && d.Grant:
					t.Fatalf("%+v among %+v: granted against the reference", me, others)
				case !grant && try && d.Refuse == wire.CodeNone:
					t.Fatalf("%+v among %+v: a try must be answered at once", me, others)
				case !grant && !try && d.Refuse != wire.CodeNone:
					t.Fatalf("%+v among %+v: a waiter was refused", me, others)
				case !grant && try && mm == semaphore.ReadOnly && d.Refuse != wire.CodeDraining:
					t.Fatalf("a reader's try behind a writer must say draining, got %s", d.Refuse)
				}
			}
		}
		if k == 4 {
			return
		}
		// Each further ticket: any supported mode, before, tied with, or after
		// the candidate's number 3, from a node before or after its node 9.
		for _, mm := range modes {
			for _, tk := range []uint64{1, 3, 5} {
				for _, node := range []wire.NodeID{1, 12} {
					others = append(others, wire.Entry{Req: wire.RequestID{Node: node, Seq: uint64(k)}, Ticket: tk, Mode: mm, State: wire.StateTicket})
					rec(k + 1)
					others = others[:len(others)-1]
				}
			}
		}
	}
	rec(0)
	if checked < 100000 {
		t.Fatalf("only %d cases checked", checked)
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]wire.Mode{"read-only": semaphore.ReadOnly, "hard": semaphore.ReadWritePriority,
		"read-write-priority": semaphore.ReadWritePriority, "exclusive": semaphore.Exclusive} {
		if m, err := semaphore.ParseMode(s); err != nil || m != want {
			t.Errorf("%q: %v %v", s, m, err)
		}
	}
	for _, s := range []string{"", "write", "READ-ONLY"} {
		if _, err := semaphore.ParseMode(s); !errors.Is(err, semaphore.ErrInvalid) || errors.Is(err, semaphore.ErrUnsupported) {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"soft", "gentle", "read-write", "read-write-gentle"} {
		if _, err := semaphore.ParseMode(s); !errors.Is(err, semaphore.ErrUnsupported) {
			t.Errorf("%q must be refused as unsupported, got %v", s, err)
		}
	}
}

func TestValidateOptions(t *testing.T) {
	if err := semaphore.ValidateOptions(semaphore.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []semaphore.Options{{QuietPeriod: -1}, {ReaderLimit: -2}} {
		if err := semaphore.ValidateOptions(o); !errors.Is(err, semaphore.ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if err := semaphore.ValidateOptions(semaphore.Options{ReaderLimit: 3}); !errors.Is(err, semaphore.ErrUnsupported) {
		t.Errorf("a reader limit must be refused until it is enforced: %v", err)
	}
}

func TestCodes(t *testing.T) {
	for err, want := range map[error]string{semaphore.ErrDraining: "draining", semaphore.ErrTimedOut: "timedout",
		semaphore.ErrNotReady: "not_ready", semaphore.ErrLost: "lost", semaphore.ErrInvalid: "invalid",
		semaphore.ErrOverflow: "overflow", semaphore.ErrUnsupported: "invalid"} {
		if got := semaphore.Code(err); got != want {
			t.Errorf("%v: %q, want %q", err, got, want)
		}
	}
}

package semaphore_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
)

// reference decides from the modes' table, phrased as conditions on sets:
// whether the candidate may go in, and whether it must be announced first.
// Hard writers (READ_WRITE_PRIORITY, exclusive) block every later ticket,
// so an earlier one stands for "active or waiting with priority"; a soft
// writer is active only when marked so; readers never announce
// themselves, so any reader ticket may be active.
func reference(me core.Candidate, others []wire.Entry) (grant, activate bool) {
	isSoft := func(m wire.Mode) bool { return m == semaphore.ReadWrite || m == semaphore.ReadWriteGentle }
	isIntent := func(m wire.Mode) bool { return m == semaphore.IntentShared || m == semaphore.IntentExclusive }
	var anyEarlier, earlierHard, earlierWriter, anyReader, activeSoft, earlierShared, earlierRO, earlierIX bool
	readersAhead := 0
	for _, o := range others {
		earlier := o.Ticket < me.Ticket || o.Ticket == me.Ticket && o.Req.Compare(me.Req) < 0
		writer := o.Mode != semaphore.ReadOnly && !isIntent(o.Mode)
		hard := writer && !isSoft(o.Mode)
		anyEarlier = anyEarlier || earlier
		earlierWriter = earlierWriter || earlier && writer
		earlierHard = earlierHard || earlier && hard
		earlierRO = earlierRO || earlier && o.Mode == semaphore.ReadOnly
		earlierIX = earlierIX || earlier && o.Mode == semaphore.IntentExclusive
		anyReader = anyReader || !writer
		activeSoft = activeSoft || isSoft(o.Mode) && o.Active
		if earlier && o.Mode == semaphore.ReadOnly {
			readersAhead++
			// A node's shared read ticket: its page views are not in
			// the table, so it may hold any number of readers.
			earlierShared = earlierShared || o.Active
		}
	}
	switch me.Mode {
	case semaphore.ReadOnly:
		return !earlierHard && !earlierIX && !activeSoft && (me.Limit == 0 || readersAhead < me.Limit && !earlierShared), false
	case semaphore.IntentShared:
		return !earlierHard && !activeSoft, false
	case semaphore.IntentExclusive:
		return !earlierHard && !earlierRO && !activeSoft, false
	case semaphore.ReadWrite:
		return !anyReader && !earlierWriter && !activeSoft, true
	case semaphore.ReadWriteGentle:
		return !anyReader && !earlierWriter && !activeSoft && me.SinceReaders >= me.Quiet, true
	}
	return !anyEarlier && !activeSoft, false
}

// TestAdmitAgainstReference compares Admit with the reference over every
// combination of up to three other tickets in every mode, active or not,
// around a candidate of each mode, tried or waiting, with a quiet period
// over or not.
func TestAdmitAgainstReference(t *testing.T) {
	modes := []wire.Mode{semaphore.ReadOnly, semaphore.ReadWritePriority, semaphore.Exclusive, semaphore.ReadWrite, semaphore.ReadWriteGentle,
		semaphore.IntentShared, semaphore.IntentExclusive}
	checked := 0
	// Tables of up to three other tickets; two under the race detector
	// (see raceDetector).
	depth := 3
	if raceDetector {
		depth = 2
	}
	var others []wire.Entry
	var rec func(k int)
	rec = func(k int) {
		for _, mm := range modes {
			for _, try := range []bool{false, true} {
				for _, variant := range []struct {
					since int64
					limit int
				}{{5, 0}, {50, 0}, {50, 1}, {50, 2}} {
					since := variant.since
					me := core.Candidate{Req: wire.RequestID{Node: 9, Seq: 3}, Ticket: 3, Mode: mm, Try: try, Quiet: 20,
						SinceReaders: since, Limit: variant.limit}
					d := semaphore.Admit(me, others)
					grant, activate := reference(me, others)
					// A writer's try that only shared read tickets (active
					// readers) keep out waits for them to yield.
					unshared := slices.DeleteFunc(slices.Clone(others), func(e wire.Entry) bool {
						return (e.Mode == semaphore.ReadOnly || e.Mode == semaphore.IntentShared) && e.Active
					})
					grantUnshared, _ := reference(me, unshared)
					reader := mm == semaphore.ReadOnly || mm == semaphore.IntentShared
					yields := !grant && try && !reader && grantUnshared
					checked++
					// The core hands every waiter one list, itself in it:
					// its own entry, active or not, changes nothing.
					for _, active := range []bool{false, true} {
						own := wire.Entry{Req: me.Req, Ticket: me.Ticket, Mode: mm, State: wire.StateTicket, Active: active}
						if got := semaphore.Admit(me, append(slices.Clone(others), own)); got != d {
							t.Fatalf("%+v among %+v and itself (active %v): %+v, without itself %+v", me, others, active, got, d)
						}
					}
					// A soft writer that waits with a hard writer behind it
					// takes a new place behind that one.
					laterHard := slices.ContainsFunc(others, func(o wire.Entry) bool {
						return (o.Mode == semaphore.ReadWritePriority || o.Mode == semaphore.Exclusive) &&
							!core.Earlier(o.Ticket, o.Req, me.Ticket, me.Req)
					})
					requeue := !grant && !try && (mm == semaphore.ReadWrite || mm == semaphore.ReadWriteGentle) && laterHard
					switch {
					case requeue != d.Requeue:
						t.Fatalf("%+v among %+v: requeue must be %v, got %+v", me, others, requeue, d)
					case grant != d.Grant:
						t.Fatalf("%+v among %+v: reference grant=%v, Admit %+v", me, others, grant, d)
					case grant && activate != d.Activate:
						t.Fatalf("%+v among %+v: activation must be %v", me, others, activate)
					case yields && d != (core.Decision{}):
						t.Fatalf("%+v among %+v: a writer's try kept out by shared read tickets only must wait, got %+v", me, others, d)
					case !grant && try && !yields && d.Refuse == wire.CodeNone:
						t.Fatalf("%+v among %+v: a try must be answered at once", me, others)
					case !grant && !try && d.Refuse != wire.CodeNone:
						t.Fatalf("%+v among %+v: a waiter was refused", me, others)
					case !grant && try && reader && variant.limit == 0 && d.Refuse != wire.CodeDraining:
						t.Fatalf("a reader's try behind a writer must say draining, got %s", d.Refuse)
					}
				}
			}
		}
		if k == depth {
			return
		}
		// Each further ticket: any mode, active or not, before, tied with,
		// or after the candidate's number 3, from a node before or after 9.
		for _, mm := range modes {
			for _, active := range []bool{false, true} {
				for _, tk := range []uint64{1, 3, 5} {
					for _, node := range []wire.NodeID{1, 12} {
						others = append(others, wire.Entry{Req: wire.RequestID{Node: node, Seq: uint64(k)}, Ticket: tk, Mode: mm,
							State: wire.StateTicket, Active: active})
						rec(k + 1)
						others = others[:len(others)-1]
					}
				}
			}
		}
	}
	rec(0)
	// 56 candidates (7 modes, tried or not, 4 variants) at each table; 84
	// choices of each further ticket (7 modes, active or not, 3 numbers,
	// 2 nodes).
	want := 0
	for k, tables := 0, 1; k <= depth; k, tables = k+1, tables*84 {
		want += 56 * tables
	}
	if checked != want {
		t.Fatalf("%d cases checked, want %d", checked, want)
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]wire.Mode{"read-only": semaphore.ReadOnly, "hard": semaphore.ReadWritePriority,
		"read-write-priority": semaphore.ReadWritePriority, "exclusive": semaphore.Exclusive,
		"soft": semaphore.ReadWrite, "read-write": semaphore.ReadWrite, "gentle": semaphore.ReadWriteGentle,
		"read-write-gentle": semaphore.ReadWriteGentle} {
		if m, err := semaphore.ParseMode(s); err != nil || m != want {
			t.Errorf("%q: %v %v", s, m, err)
		}
	}
	for _, s := range []string{"", "write", "READ-ONLY"} {
		if _, err := semaphore.ParseMode(s); !errors.Is(err, semaphore.ErrInvalid) {
			t.Errorf("%q: %v", s, err)
		}
	}
}

// TestRefuseEarlyMeetsWritersInTheDoorway: a writer still choosing its
// number (no ticket yet) has begun its drain if it is a priority or
// exclusive one (or, for READ_ONLY, INTENT_EXCLUSIVE below): a reader's
// try is refused with draining; a soft writer, a reader or an intent
// reader still choosing refuses nothing, and no writer's try is refused.
func TestRefuseEarlyMeetsWritersInTheDoorway(t *testing.T) {
	for _, c := range []struct {
		choosing wire.Mode
		ro, is   wire.Code
	}{
		{semaphore.ReadWritePriority, wire.CodeDraining, wire.CodeDraining},
		{semaphore.Exclusive, wire.CodeDraining, wire.CodeDraining},
		{semaphore.IntentExclusive, wire.CodeDraining, wire.CodeNone},
		{semaphore.ReadWrite, wire.CodeNone, wire.CodeNone},
		{semaphore.ReadWriteGentle, wire.CodeNone, wire.CodeNone},
		{semaphore.ReadOnly, wire.CodeNone, wire.CodeNone},
		{semaphore.IntentShared, wire.CodeNone, wire.CodeNone},
	} {
		table := []wire.Entry{
			{Req: wire.RequestID{Node: 1, Seq: 1}, Ticket: 1, Mode: semaphore.ReadOnly, State: wire.StateTicket, Active: true},
			{Req: wire.RequestID{Node: 2, Seq: 1}, Mode: c.choosing, State: wire.StateChoosing},
		}
		if got := semaphore.RefuseEarly(semaphore.ReadOnly, table); got != c.ro {
			t.Errorf("READ_ONLY try beside %v choosing: %v, want %v", c.choosing, got, c.ro)
		}
		if got := semaphore.RefuseEarly(semaphore.IntentShared, table); got != c.is {
			t.Errorf("INTENT_SHARED try beside %v choosing: %v, want %v", c.choosing, got, c.is)
		}
		for _, m := range []wire.Mode{semaphore.ReadWritePriority, semaphore.Exclusive, semaphore.ReadWrite, semaphore.ReadWriteGentle, semaphore.IntentExclusive} {
			if got := semaphore.RefuseEarly(m, table); got != wire.CodeNone {
				t.Errorf("a %v try beside %v choosing refused early (%v): only readers are", m, c.choosing, got)
			}
		}
	}
}

// TestRefuseEarlyOnlyWhatAdmitRefuses: every table of up to three durable
// tickets, each of any mode, active or not: a READ_ONLY try that
// RefuseEarly refuses is one Admit refuses as draining, whatever ticket
// after theirs it gets, with or without a reader limit; and it refuses
// every such try that Admit refuses as draining.
func TestRefuseEarlyOnlyWhatAdmitRefuses(t *testing.T) {
	modes := []wire.Mode{semaphore.ReadOnly, semaphore.ReadWritePriority, semaphore.Exclusive, semaphore.ReadWrite, semaphore.ReadWriteGentle,
		semaphore.IntentShared, semaphore.IntentExclusive}
	var entries []wire.Entry
	for i, m := range modes {
		for _, active := range []bool{false, true} {
			entries = append(entries, wire.Entry{Req: wire.RequestID{Node: wire.NodeID(i + 1), Seq: 1}, Ticket: uint64(i + 1),
				Mode: m, State: wire.StateTicket, Active: active})
		}
	}
	var tables [][]wire.Entry
	var grow func(from int, table []wire.Entry)
	grow = func(from int, table []wire.Entry) {
		tables = append(tables, slices.Clone(table))
		if len(table) == 3 {
			return
		}
		for i := from; i < len(entries); i++ {
			if !slices.ContainsFunc(table, func(e wire.Entry) bool { return e.Req == entries[i].Req }) {
				grow(i+1, append(table, entries[i]))
			}
		}
	}
	grow(0, nil)
	refused := 0
	for _, table := range tables {
		for _, c := range []struct {
			mode  wire.Mode
			limit int
		}{{semaphore.ReadOnly, 0}, {semaphore.ReadOnly, 1}, {semaphore.ReadOnly, 5}, {semaphore.IntentShared, 0}} {
			me := core.Candidate{Req: wire.RequestID{Node: 9, Seq: 1}, Ticket: 100, Mode: c.mode, Try: true, Limit: c.limit}
			d := semaphore.Admit(me, table)
			early := semaphore.RefuseEarly(c.mode, table)
			if (early == wire.CodeDraining) != (d.Refuse == wire.CodeDraining) || early != wire.CodeNone && early != wire.CodeDraining {
				t.Fatalf("table %v, %v limit %d: RefuseEarly %v, Admit %+v", table, c.mode, c.limit, early, d)
			}
			if early != wire.CodeNone {
				refused++
			}
		}
		for _, m := range modes[1:5] {
			if code := semaphore.RefuseEarly(m, table); code != wire.CodeNone {
				t.Fatalf("a %v try refused early (%v): only readers are", m, code)
			}
		}
		if code := semaphore.RefuseEarly(semaphore.IntentExclusive, table); code != wire.CodeNone {
			t.Fatalf("an intent-exclusive try refused early (%v): only readers are", code)
		}
	}
	if refused == 0 || refused == 4*len(tables) {
		t.Fatalf("%d of %d tries refused: the tables do not cover both answers", refused, 4*len(tables))
	}
}

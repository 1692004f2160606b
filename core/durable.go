package core

import (
	"cmp"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// WriteKind says what a Write does to the durable lock table.
type WriteKind uint8

const (
	// WriteTicket stores Entry under Name and raises Name's high-water mark
	// to Entry.Ticket if it is higher. The high-water mark never goes down.
	WriteTicket WriteKind = iota + 1
	// WriteLifetime sets the Lifetime of a stored ticket (a renewal).
	WriteLifetime
	// WriteDelete removes a stored ticket or tombstone; the high-water
	// mark stays.
	WriteDelete
	// WriteHighWater raises Name's high-water mark to Entry.Ticket.
	WriteHighWater
	// WriteFence records that lock work below epoch Epoch is refused.
	WriteFence
	// WriteComplete records that the table is complete for view Epoch: it
	// holds what the previous view's leaders handed over.
	WriteComplete
	// WriteLedView records View, a view this node leads: until the node is
	// complete for it, it keeps taking its table over, across restarts.
	WriteLedView
	// WriteTomb records that Entry.Req on Name was released, in place of
	// its ticket if there was one: a DurableTicket in StateReleased with
	// Lifetime. Kept until a WriteDelete of the same request.
	WriteTomb
	// WriteForget drops Name, which holds no ticket or tombstone any more:
	// its high-water mark goes, and the floor is raised to Entry.Ticket
	// (the mark it had) in the same write, so a ticket of the name taken
	// later is still above every earlier one.
	WriteForget
	// WriteFloor raises the floor to Entry.Ticket (a handoff brings the
	// previous leaders' floor).
	WriteFloor
)

// Write is one change the caller must make durable before sending the
// messages of the same Ready.
type Write struct {
	Kind  WriteKind
	Name  string
	Entry wire.Entry
	// Lifetime is how many ticks the ticket had left when written. A restart
	// counts it again from zero, which only keeps a ticket longer.
	Lifetime int64
	// Epoch is the epoch of WriteFence and WriteComplete.
	Epoch uint64
	// View is the view of WriteLedView.
	View wire.View
	// Lazy: nothing sent rests on this write: losing it in a crash costs
	// only liveness (a released ticket comes back until the other leaders
	// or its lifetime drop it; a name is forgotten later). It must still
	// become durable in order with the others: a later write that is
	// durable implies it is.
	Lazy bool
}

// Scopes let a caller send a Ready's answers before writes of earlier
// Readys that they do not rest on are durable. Everything a message of
// one name says (its table, its high-water mark, whether a ticket is
// there, its tombstones) comes from writes of that name, from writes of
// no name (a fence, a floor, a view led or completed) and from memory
// that no write holds (choosing flags, watches, incarnations, the
// Lamport clock, which receivers only take as a maximum). So a message
// whose scope is a name may leave once every earlier write of that name
// and every earlier write of no name is durable, before the writes of
// other names are; a message of no scope waits for every
// earlier write, as the Ready contract says. Stores make writes durable
// in order, so a crash that loses a write loses every later one too:
// after it, the node never said anything about the lost writes' names,
// and what it said about others rests on what it kept.
//
// A master's messages to the leaders (ENTER, GET_MAX, ADD_TICKET, WATCH,
// UNWATCH, RELEASE, RENEW, EXIT, ACTIVATE, CONFIRM) say only what its
// own requests are and want: a node's own requests keep nothing on disk
// (see Events below), and what its master knows of any replica's table,
// its own node's included, came in that replica's answers and reports,
// which waited for their writes; a replica takes them as it takes the
// same messages from a master on another node, which come whatever its
// disk is doing. So they do not wait for the writes of their name,
// which are the node's replica's: on a node that is a master
// and a leader at once, a master's release or confirmation would
// otherwise wait for the fsync of another client's ticket on the same
// name (a crowd on one name: every handoff). They still wait for writes
// of no name (a fence, a view led). Per name and direction, the order of
// messages stays the order of the Readys: a master's messages among
// themselves, a replica's among themselves; the two go to different
// sides of their receiver.
//
// Events rest on no write of their node: they are its own clients'
// requests (the master's side), which keep nothing on disk (a client's
// lease outlives its agent by its own timer) and learn everything from
// messages, the local replica's too, which came through the same gate.
// They may be delivered before messages of their Ready that still wait:
// a crash then is a crash after those messages were lost on the way.

// Scope is the name a write is about, or "" for a write about the whole
// table (a fence, a completion, a view led, a floor): every message waits
// for those.
func (w Write) Scope() string {
	switch w.Kind {
	case WriteTicket, WriteLifetime, WriteDelete, WriteHighWater, WriteTomb, WriteForget:
		return w.Name
	}
	return ""
}

// Scopes are the scopes of a Ready's writes: the names they are about,
// once each in order, and whether one is about the whole table.
func Scopes(ws []Write) (names []string, whole bool) {
	for _, w := range ws {
		switch s := w.Scope(); {
		case s == "":
			whole = true
		case !slices.Contains(names, s):
			names = append(names, s)
		}
	}
	return names, whole
}

// MessageScope is the name whose writes m rests on, or "" when m may rest
// on any write (the handoff's and membership's messages): see Scope.
func (n *Node) MessageScope(m wire.Message) string {
	switch m.Kind {
	case wire.KindEnter, wire.KindGetMax, wire.KindAddTicket, wire.KindWatch,
		wire.KindUnwatch, wire.KindRelease, wire.KindRenew, wire.KindExit,
		wire.KindActivate, wire.KindConfirm:
		// A master's: it rests on no write of its name (see Scopes).
		return RequestScope
	case wire.KindEnterAck, wire.KindGetMaxAck, wire.KindAddTicketAck,
		wire.KindReport, wire.KindReleaseAck, wire.KindRenewAck, wire.KindActivateAck,
		wire.KindRevoked, wire.KindFormer, wire.KindHolds, wire.KindHoldsAck,
		wire.KindConfirmAck, wire.KindYield:
		if n.cfg.Mutant.on(MutantAnswersBeforeWrites) && m.Name != "" {
			return "\x00" + m.Name // a scope no write has: nothing waits
		}
		return m.Name
	}
	return ""
}

// RequestScope is the scope of a master's messages: no write has it (the
// API refuses names with control characters), so they wait only for the
// writes about the whole table.
const RequestScope = "\x00request"

// DurableTicket is a ticket as stored, or a tombstone: a released request,
// in StateReleased, with ticket 0.
type DurableTicket struct {
	Entry    wire.Entry
	Lifetime int64
}

// Durable is everything a replica persists: what it must find again after a
// restart. Apply is the reference meaning of a Write; stores must match it.
type Durable struct {
	HighWater map[string]uint64
	// Tickets holds per name its tickets and tombstones (see WriteTomb).
	Tickets map[string]map[wire.RequestID]DurableTicket
	// Fence: lock work of epochs below it is refused.
	Fence uint64
	// Complete: the epoch of the last view whose handoff this node finished.
	Complete uint64
	// Led: views this node leads whose handoff it has not finished.
	Led map[uint64]wire.View
	// Floor is at least the high-water mark of every name forgotten
	// (WriteForget): a name without a mark of its own starts from it.
	Floor uint64
}

// NewDurable returns an empty durable state.
func NewDurable() *Durable {
	return &Durable{HighWater: map[string]uint64{}, Tickets: map[string]map[wire.RequestID]DurableTicket{}, Led: map[uint64]wire.View{}}
}

// Apply makes the writes part of d, in order.
func (d *Durable) Apply(ws []Write) {
	for _, w := range ws {
		switch w.Kind {
		case WriteTicket:
			if w.Entry.Ticket > d.HighWater[w.Name] {
				d.HighWater[w.Name] = w.Entry.Ticket
			}
			d.set(w.Name, DurableTicket{Entry: w.Entry, Lifetime: w.Lifetime})
		case WriteTomb:
			d.set(w.Name, DurableTicket{Entry: wire.Entry{Req: w.Entry.Req, State: wire.StateReleased}, Lifetime: w.Lifetime})
		case WriteLifetime:
			if t, ok := d.Tickets[w.Name][w.Entry.Req]; ok {
				t.Lifetime = w.Lifetime
				d.Tickets[w.Name][w.Entry.Req] = t
			}
		case WriteDelete:
			delete(d.Tickets[w.Name], w.Entry.Req)
			if len(d.Tickets[w.Name]) == 0 {
				delete(d.Tickets, w.Name)
			}
		case WriteHighWater:
			d.HighWater[w.Name] = max(d.HighWater[w.Name], w.Entry.Ticket)
		case WriteForget:
			d.Floor = max(d.Floor, w.Entry.Ticket)
			delete(d.HighWater, w.Name)
		case WriteFloor:
			d.Floor = max(d.Floor, w.Entry.Ticket)
		case WriteFence:
			d.Fence = max(d.Fence, w.Epoch)
		case WriteComplete:
			d.Complete = max(d.Complete, w.Epoch)
			for e := range d.Led {
				if e <= d.Complete {
					delete(d.Led, e)
				}
			}
		case WriteLedView:
			if w.View.Epoch > d.Complete {
				d.Led[w.View.Epoch] = w.View.Leadership()
			}
		}
	}
}

func (d *Durable) set(name string, t DurableTicket) {
	ts := d.Tickets[name]
	if ts == nil {
		ts = map[wire.RequestID]DurableTicket{}
		d.Tickets[name] = ts
	}
	ts[t.Entry.Req] = t
}

// Clone returns a deep copy of d.
func (d *Durable) Clone() *Durable {
	c := NewDurable()
	c.Fence, c.Complete, c.Floor = d.Fence, d.Complete, d.Floor
	for e, v := range d.Led {
		c.Led[e] = v.Leadership()
	}
	maps.Copy(c.HighWater, d.HighWater)
	for name, t := range d.Tickets {
		c.Tickets[name] = maps.Clone(t)
	}
	return c
}

// sortedKeys gives a map's keys in a fixed order: the core must not let Go's
// random map order leak into its outputs, or a seed would not replay.
// nameSet is a set of names, taken in order.
type nameSet map[string]struct{}

func (s nameSet) add(name string) { s[name] = struct{}{} }

// take empties the set and returns what it held, in order.
func (s nameSet) take() []string {
	switch len(s) {
	case 0:
		return nil // every Ready asks, most often of an empty set
	case 1:
		for name := range s {
			delete(s, name)
			return []string{name}
		}
	}
	names := sortedKeys(s)
	clear(s)
	return names
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}

func sortedReqs[V any](m map[wire.RequestID]V) []wire.RequestID {
	return slices.SortedFunc(maps.Keys(m), wire.RequestID.Compare)
}

func sortedNodes[V any](m map[wire.NodeID]V) []wire.NodeID {
	return sortedKeys(m)
}

package core

import "github.com/sluicehq/sluice/core/wire"

// Candidate is the request whose grant is being decided.
type Candidate struct {
	Req    wire.RequestID
	Ticket uint64
	Mode   wire.Mode
	// Try is set for an obtain timeout of 0: the policy must grant or refuse,
	// never wait on another holder.
	Try bool
}

// Decision is an admission policy's answer. Neither Grant nor a Refuse code
// means wait for the next report.
type Decision struct {
	Grant  bool
	Refuse wire.Code
}

// Admit decides whether me may be granted, given every other request of the
// name that holds a ticket on a quorum's merged view. The core has already
// waited for every request still choosing; Admit only orders tickets.
type Admit func(me Candidate, others []wire.Entry) Decision

// Earlier reports whether ticket (t, r) comes before ticket (u, s) in bakery
// order: by number, then by request id.
func Earlier(t uint64, r wire.RequestID, u uint64, s wire.RequestID) bool {
	if t != u {
		return t < u
	}
	return r.Compare(s) < 0
}

// Exclusive is the bakery's own rule: the earliest ticket goes in alone.
func Exclusive(me Candidate, others []wire.Entry) Decision {
	for _, o := range others {
		if Earlier(o.Ticket, o.Req, me.Ticket, me.Req) {
			if me.Try {
				return Decision{Refuse: wire.CodeTimedOut}
			}
			return Decision{}
		}
	}
	return Decision{Grant: true}
}

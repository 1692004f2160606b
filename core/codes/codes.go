package codes

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/core/wire"
)

// The sentinels of the failures a client can see. The core returns the
// first seven; semaphore gives the core's codes the names clients use
// (semaphore.ErrDraining), the client its own (semaphore.ErrUnavailable).
var (
	ErrInvalid  = errors.New("invalid request")
	ErrOverflow = errors.New("too many requests wait on this name")
	ErrNotReady = errors.New("not ready to decide requests")
	ErrTimedOut = errors.New("timed out")
	ErrDraining = errors.New("draining: a writer holds or waits for this name")
	ErrLost     = errors.New("lease lost")
	// ErrUnknownLease: no such lease or request (released, or ended and
	// forgotten), at the core, the agent or, as the client hears it, both.
	ErrUnknownLease = errors.New("unknown lease")
	// ErrBadRequest: a request the API could not read (bad JSON, unknown
	// fields, a wrong method or path, a body too large), or a membership
	// change that must not be made. It is an ErrInvalid.
	ErrBadRequest = Mark(ErrInvalid, "bad request")
	// ErrUnauthorized: the bearer token is missing or wrong.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: the caller is known, and its role does not allow the
	// call on that name (the agent's --role settings).
	ErrForbidden = errors.New("forbidden")
	// ErrUnavailable: the agent could not be reached, did not answer as an
	// agent does, or failed in a way no other code names.
	ErrUnavailable = errors.New("agent unavailable")
	// ErrCanceled: the agent gave the call up because the call's context
	// ended. For a client that is the agent not serving it: an
	// ErrUnavailable.
	ErrCanceled = Mark(ErrUnavailable, "call canceled")
	// ErrConflict: a membership change lost to another, or one is under
	// way, or there is nothing to vouch for.
	ErrConflict = errors.New("conflict")
	// ErrChangeTimedOut: a membership change did not end in time; it may
	// still commit.
	ErrChangeTimedOut = errors.New("membership change not confirmed in time; it may still commit")
)

// The codes of the API's own failures, which never cross the mesh. The
// core's codes are spelled by wire.Code's String.
const (
	BadRequest     = "bad_request"
	Unauthorized   = "unauthorized"
	Forbidden      = "forbidden"
	Unavailable    = "unavailable"
	Canceled       = "canceled"
	Conflict       = "conflict"
	ChangeTimedOut = "change_timedout"
)

// Row is one failure as every surface spells it.
type Row struct {
	// Code is the stable JSON spelling ("draining"): the "error" of an
	// API answer, the "code" of a watch event.
	Code string
	// Wire is the core's code on the wire; wire.CodeNone for the API's
	// own failures.
	Wire wire.Code
	// Err is the sentinel: errors.Is(err, Err) is how Go code asks for
	// the failure, on the agent's side and on the client's.
	Err error
	// Status is the HTTP status of the API's answer.
	Status int
	// also are errors that are not ours which the API files under Code.
	also []error
}

func coreRow(c wire.Code, err error, status int) Row {
	return Row{Code: c.String(), Wire: c, Err: err, Status: status}
}

// table is the one translation. Of takes the first row that matches, so
// a sentinel that is also another (ErrBadRequest is an ErrInvalid) comes
// before it; the order also settles an error that wraps two (a release
// not confirmed before the deadline is not_ready, not canceled).
// Statuses are spelled as numbers: the core imports this package, and
// must not import net/http.
var table = []Row{
	{Code: BadRequest, Err: ErrBadRequest, Status: 400},
	coreRow(wire.CodeInvalid, ErrInvalid, 400),
	coreRow(wire.CodeUnknownLease, ErrUnknownLease, 404),
	{Code: Unauthorized, Err: ErrUnauthorized, Status: 401},
	{Code: Forbidden, Err: ErrForbidden, Status: 403},
	coreRow(wire.CodeTimedOut, ErrTimedOut, 409), // held by others for the whole wait
	coreRow(wire.CodeDraining, ErrDraining, 503),
	coreRow(wire.CodeOverflow, ErrOverflow, 429),
	coreRow(wire.CodeLost, ErrLost, 410),
	coreRow(wire.CodeNotReady, ErrNotReady, 503),
	{Code: Conflict, Err: ErrConflict, Status: 409},
	{Code: ChangeTimedOut, Err: ErrChangeTimedOut, Status: 504},
	{Code: Canceled, Err: ErrCanceled, Status: 503, also: []error{context.Canceled, context.DeadlineExceeded}},
	{Code: Unavailable, Err: ErrUnavailable, Status: 500},
}

// Of is the row of err: the first whose sentinel (or other error) err
// is. An error no row names is Unavailable's: the API answers it 500.
func Of(err error) Row {
	for _, r := range table {
		if errors.Is(err, r.Err) {
			return r
		}
		for _, e := range r.also {
			if errors.Is(err, e) {
				return r
			}
		}
	}
	return table[len(table)-1]
}

// ByCode is the row of a JSON code; false for a code the table lacks
// (from a newer agent, or not an agent's answer at all).
func ByCode(code string) (Row, bool) {
	for _, r := range table {
		if r.Code == code {
			return r, true
		}
	}
	return Row{}, false
}

// ByWire is the row of a wire code; false for wire.CodeNone.
func ByWire(c wire.Code) (Row, bool) {
	for _, r := range table {
		if c != wire.CodeNone && r.Wire == c {
			return r, true
		}
	}
	return Row{}, false
}

// Rows lists the table, in the order Of searches it.
func Rows() []Row { return append([]Row(nil), table...) }

// Mark is a new sentinel for a failure of kind: errors.Is tells it apart
// from every other error, and also finds kind in it, so Of files it under
// kind's code. The runtime's own sentinels use it (a stopped node is not
// ready).
func Mark(kind error, msg string) error { return With(kind, errors.New(msg)) }

// With files err under kind's code without changing its text: for
// errors of other packages that the API answers with a code of the table
// (a membership change that lost to another is a conflict).
func With(kind, err error) error { return &filed{err: err, kind: kind} }

type filed struct{ err, kind error }

func (e *filed) Error() string   { return e.err.Error() }
func (e *filed) Unwrap() []error { return []error{e.err, e.kind} }

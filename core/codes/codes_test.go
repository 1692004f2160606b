package codes_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
)

// TestTableRoundTrips: every row's sentinel, wrapped, finds its own row;
// its code finds it back; codes are unique; the core's rows are spelled as
// the wire spells them, and every wire code has one.
func TestTableRoundTrips(t *testing.T) {
	seen := map[string]bool{}
	wires := map[wire.Code]bool{}
	for _, r := range codes.Rows() {
		if seen[r.Code] || r.Code == "" || r.Err == nil || r.Status < 400 || r.Status > 599 {
			t.Errorf("row %+v: empty, repeated or not an error status", r)
		}
		seen[r.Code] = true
		if got := codes.Of(fmt.Errorf("wrapped: %w", r.Err)); got.Code != r.Code {
			t.Errorf("%v is filed under %q, want %q", r.Err, got.Code, r.Code)
		}
		if back, ok := codes.ByCode(r.Code); !ok || back.Err != r.Err {
			t.Errorf("%q maps back to %v", r.Code, back.Err)
		}
		if r.Wire != wire.CodeNone {
			wires[r.Wire] = true
			if r.Code != r.Wire.String() {
				t.Errorf("%q is spelled %q on the wire", r.Code, r.Wire.String())
			}
			if back, ok := codes.ByWire(r.Wire); !ok || back.Code != r.Code {
				t.Errorf("wire code %v maps back to %q", r.Wire, back.Code)
			}
		}
	}
	for c := wire.CodeNone + 1; ; c++ {
		if _, ok := wire.ParseCode(c.String()); !ok {
			break // past the last code
		}
		if !wires[c] {
			t.Errorf("wire code %v has no row", c)
		}
	}
}

// TestCodes pins the spellings and statuses clients depend on (README,
// Local API).
func TestCodes(t *testing.T) {
	for err, want := range map[error]struct {
		code   string
		status int
	}{
		codes.ErrDraining: {"draining", 503}, codes.ErrTimedOut: {"timedout", 409}, codes.ErrNotReady: {"not_ready", 503},
		codes.ErrLost: {"lost", 410}, codes.ErrInvalid: {"invalid", 400}, codes.ErrOverflow: {"overflow", 429},
		codes.ErrUnknownLease: {"unknown_lease", 404}, codes.ErrBadRequest: {"bad_request", 400},
		codes.ErrUnauthorized: {"unauthorized", 401}, codes.ErrForbidden: {"forbidden", 403}, codes.ErrConflict: {"conflict", 409},
		codes.ErrChangeTimedOut: {"change_timedout", 504}, context.Canceled: {"canceled", 503},
		context.DeadlineExceeded: {"canceled", 503}, errors.New("other"): {"unavailable", 500},
	} {
		if got := codes.Of(err); got.Code != want.code || got.Status != want.status {
			t.Errorf("%v: %q %d, want %q %d", err, got.Code, got.Status, want.code, want.status)
		}
	}
	// An error that wraps two: the earlier row wins (a release not
	// confirmed before the call's deadline is not_ready).
	if got := codes.Of(fmt.Errorf("%w: %w", codes.ErrNotReady, context.DeadlineExceeded)); got.Code != "not_ready" {
		t.Errorf("not ready past the deadline: %q", got.Code)
	}
	if _, ok := codes.ByCode("sideways"); ok {
		t.Error("an unknown code has a row")
	}
}

// TestMarkAndWith: a marked sentinel is itself and its kind; an error
// filed With a kind keeps its text.
func TestMarkAndWith(t *testing.T) {
	stopped := codes.Mark(codes.ErrNotReady, "node stopped")
	other := codes.Mark(codes.ErrNotReady, "node stopped")
	err := fmt.Errorf("acquire: %w", stopped)
	if !errors.Is(err, stopped) || errors.Is(err, other) || !errors.Is(err, codes.ErrNotReady) || codes.Of(err).Code != "not_ready" {
		t.Fatalf("marked: %v", err)
	}
	if !errors.Is(codes.ErrBadRequest, codes.ErrInvalid) || !errors.Is(codes.ErrCanceled, codes.ErrUnavailable) {
		t.Fatal("bad_request must be invalid, canceled unavailable")
	}
	busy := errors.New("election: a change is under way")
	filed := codes.With(codes.ErrConflict, busy)
	if filed.Error() != busy.Error() || !errors.Is(filed, busy) || codes.Of(filed).Status != 409 {
		t.Fatalf("filed: %v (%d)", filed, codes.Of(filed).Status)
	}
}

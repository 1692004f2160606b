package election

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Off is the priority of a node that never becomes a leader.
const Off = 15

// DefaultPriority is the priority of a node that says nothing else.
const DefaultPriority = 14

// Sentinel errors, tested with errors.Is.
var (
	ErrBadID = errors.New("election: malformed id")
	// ErrBadPriority: a priority an operator wrote that is not 1..14 or
	// "off" (ParsePriority).
	ErrBadPriority = errors.New("election: bad priority")
	ErrStaleView   = errors.New("election: view of an old epoch")
	ErrBadView     = errors.New("election: malformed view")
	ErrBadConfig   = errors.New("election: bad config")
	// ErrForeign: a message of another cluster (or of none), refused.
	ErrForeign = errors.New("election: message of another cluster")
	// ErrStale: a life of a node older than one a member knows.
	ErrStale = errors.New("election: stale life")
	// ErrNotCheckedIn: a vote asked of a node that has not checked in.
	ErrNotCheckedIn = errors.New("election: not checked in")
	// ErrCheckedIn: a vouch for the store of a node that checked in.
	ErrCheckedIn = errors.New("election: checked in already")
	// ErrNotReady: a membership change asked of a node without a valid view.
	ErrNotReady = errors.New("election: not ready")
	// ErrBadChange: a membership change that must not be made.
	ErrBadChange = errors.New("election: bad membership change")
	// ErrBusy: a membership change is already under way at this node.
	ErrBusy = errors.New("election: a membership change is under way")
	// ErrChangeLost: a membership change did not commit; nothing changed.
	ErrChangeLost = errors.New("election: membership change not committed")
	// ErrBelowLevel: a vote of a node that offers less than the cluster's
	// codec (an older release), not counted; or a view that would lower
	// the codec, refused.
	ErrBelowLevel = errors.New("election: below the cluster's codec")
)

// ID is a node's election identity, computed once at start. Nodes compare
// by priority, then random, address, pid and name: the smallest wins.
type ID struct {
	Priority uint8 // 1..14, or Off; 0 only while a sitting leader competes
	Random   uint32
	Address  string
	PID      uint32
	Name     string
}

// Compare orders ids, smallest first.
func (a ID) Compare(b ID) int {
	return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Random, b.Random),
		cmp.Compare(a.Address, b.Address), cmp.Compare(a.PID, b.PID), cmp.Compare(a.Name, b.Name))
}

// String is the id's wire form: "14|00c0ffee|/ip4/10.0.0.1/tcp/4001|1234|web-3".
func (a ID) String() string {
	return fmt.Sprintf("%02d|%08x|%s|%d|%s", a.Priority, a.Random, a.Address, a.PID, a.Name)
}

// Validate reports whether the id can be sent and parsed back.
func (a ID) Validate() error {
	switch {
	case a.Priority < 1 || a.Priority > Off:
		return fmt.Errorf("%w: priority %d is not 1..14 or off", ErrBadID, a.Priority)
	case a.Address == "" || a.Name == "":
		return fmt.Errorf("%w: empty address or name", ErrBadID)
	case strings.Contains(a.Address, "|") || strings.Contains(a.Name, "|"):
		return fmt.Errorf("%w: '|' in address or name", ErrBadID)
	case len(a.Address)+len(a.Name) > 512:
		return fmt.Errorf("%w: address and name over 512 bytes", ErrBadID)
	}
	return nil
}

// ParseID is the inverse of String; it refuses anything Validate refuses.
func ParseID(s string) (ID, error) {
	parts := strings.Split(s, "|")
	if len(parts) != 5 {
		return ID{}, fmt.Errorf("%w: %d fields in %q, want 5", ErrBadID, len(parts), s)
	}
	prio, err1 := strconv.ParseUint(parts[0], 10, 8)
	random, err2 := strconv.ParseUint(parts[1], 16, 32)
	pid, err3 := strconv.ParseUint(parts[3], 10, 32)
	if err := errors.Join(err1, err2, err3); err != nil {
		return ID{}, fmt.Errorf("%w: %q: %v", ErrBadID, s, err)
	}
	id := ID{Priority: uint8(prio), Random: uint32(random), Address: parts[2], PID: uint32(pid), Name: parts[4]}
	if err := id.Validate(); err != nil {
		return ID{}, err
	}
	return id, nil
}

// ParsePriority reads a priority as an operator writes it: 1..14 or "off".
func ParsePriority(s string) (uint8, error) {
	if s == "off" {
		return Off, nil
	}
	p, err := strconv.ParseUint(s, 10, 8)
	if err != nil || p < 1 || p > 14 {
		return 0, fmt.Errorf("%w: %q is not 1..14 or off", ErrBadPriority, s)
	}
	return uint8(p), nil
}

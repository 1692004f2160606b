package election

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/sluicehq/sluice/core/wire"
)

// Quorum is a majority of n members: the number that must know each
// other before an election, and accept a view for it to be valid.
func Quorum(n int) int { return n/2 + 1 }

// ClusterID is the id of the cluster born from these bootstrap members: a
// hash of their ids in order, never 0. Every election message carries it.
func ClusterID(bootstrap []wire.NodeID) uint64 {
	ids := slices.Sorted(slices.Values(bootstrap))
	ids = slices.Compact(ids)
	h := fnv.New64a()
	var b [8]byte
	for _, id := range ids {
		binary.BigEndian.PutUint64(b[:], uint64(id))
		h.Write(b[:])
	}
	return max(h.Sum64(), 1)
}

// Life is one run of a node (see wire.Life).
type Life = wire.Life

// Change is one membership change: add a node or remove a member.
type Change struct {
	Add, Remove wire.NodeID
}

func (c Change) String() string {
	if c.Add != 0 {
		return fmt.Sprintf("add %d", c.Add)
	}
	return fmt.Sprintf("remove %d", c.Remove)
}

// ChangeResult is the end of a change started by ChangeMembers: Err is
// nil when a valid view of epoch Epoch carries it.
type ChangeResult struct {
	Change Change
	Epoch  uint64
	Err    error
}

// StaleError says that a member knows a newer life of this node than the
// one it runs: its store was rolled back to an older copy, or lost.
type StaleError struct {
	By    wire.NodeID // the member that knows better
	Knows uint32      // the incarnation it knows
	Mine  uint32      // this node's incarnation
	// Seen is the age of the store that Knows reached by its hellos, when
	// that is what the member knows better: the store holds less (Store).
	Seen, Store uint64
}

func (s *StaleError) Error() string {
	if s.Seen > 0 {
		return fmt.Sprintf("%v: member %d saw incarnation %d of this node reach write %d, its store holds %d: the store was restored from an older copy",
			ErrStale, s.By, s.Knows, s.Seen, s.Store)
	}
	return fmt.Sprintf("%v: member %d knows incarnation %d of this node, its store says %d: the store was lost or restored from an older copy",
		ErrStale, s.By, s.Knows, s.Mine)
}

func (s *StaleError) Unwrap() error { return ErrStale }

// mark is the newest age of a node's store heard in its hellos.
type mark struct {
	inc    uint32
	writes uint64
}

// Members are the voters: those of the valid view, or the bootstrap
// members before the first view.
func (e *Election) Members() []wire.NodeID {
	if e.p.Valid.Epoch > 0 {
		return slices.Clone(e.p.Valid.Members)
	}
	return slices.Clone(e.p.Bootstrap)
}

// MembersAre reports whether the voters are ids, in Members' order,
// without a copy: the runtime asks after every Ready.
func (e *Election) MembersAre(ids []wire.NodeID) bool {
	if e.p.Valid.Epoch > 0 {
		return slices.Equal(e.p.Valid.Members, ids)
	}
	return slices.Equal(e.p.Bootstrap, ids)
}

func (e *Election) isMember(id wire.NodeID) bool {
	if e.p.Valid.Epoch > 0 {
		return slices.Contains(e.p.Valid.Members, id)
	}
	return slices.Contains(e.p.Bootstrap, id)
}

// Cluster is the id of the cluster this node belongs to (0: a joining
// node that has not heard from it yet).
func (e *Election) Cluster() uint64 { return e.p.Cluster }

// CheckedIn reports whether a majority of the other members confirmed
// this node's life: until then it neither votes nor hands out a view, and
// its runtime must keep lock traffic away from the lock core.
func (e *Election) CheckedIn() bool { return e.checkedIn }

// Stale is the reason this node stopped for good, or nil.
func (e *Election) Stale() error {
	if e.stale == nil {
		return nil
	}
	return e.stale
}

// quorumOf reports whether the nodes in votes hold a majority of set.
// The mutant counts every vote, members or not.
func (e *Election) quorumOf(votes map[wire.NodeID]bool, set []wire.NodeID) bool {
	if e.cfg.Mutant.on(MutantNonMemberVotes) {
		return len(votes) >= Quorum(len(set))
	}
	n := 0
	for _, id := range set {
		if votes[id] {
			n++
		}
	}
	return n >= Quorum(len(set))
}

// checkIn asks the other members to record this life, showing the lives
// the store remembers (see KindCheckIn).
func (e *Election) checkIn() {
	lives, none := e.p.Since[:len(e.p.Since)-1], e.p.Confirmed == (Life{})
	if !none {
		lives = append([]Life{e.p.Confirmed}, lives...)
	}
	for _, id := range e.Members() {
		if id != e.cfg.Node {
			e.send(wire.Message{Kind: wire.KindCheckIn, To: id, Incarnation: e.cfg.Incarnation, Nonce: e.cfg.Nonce,
				Lives: slices.Clone(lives), Unconfirmed: none, StoreAge: e.startWrites})
		}
	}
}

// updateCheckedIn ends the check-in once a majority of the other members
// confirmed this life; a node that is the only member has nobody to ask.
func (e *Election) updateCheckedIn() {
	if e.checkedIn || e.stale != nil || e.p.Cluster == 0 {
		return
	}
	var others []wire.NodeID
	for _, id := range e.Members() {
		if id != e.cfg.Node {
			others = append(others, id)
		}
	}
	full := len(others) == 0 || e.quorumOf(e.checkAcks, others)
	if !full && !e.vouchedQuorum() {
		return
	}
	e.checkedIn = true
	// A life checked in on the operator's word is not confirmed by a
	// majority of the others: the store keeps showing the last life that
	// was, and this one stays among those since.
	if full && !e.cfg.Mutant.on(MutantNoCheckIn) {
		e.p.Confirmed, e.p.Since, e.persist = e.p.Since[len(e.p.Since)-1], e.p.Since[len(e.p.Since)-1:], true
	}
	if e.p.Valid.Epoch > 0 {
		v := e.p.Valid.Clone()
		e.view = &v
	}
}

// VouchStore is the operator's word that this node's store is its own: it
// was never restored from a copy nor taken from another machine, so it
// holds everything the node acknowledged. The check-in then needs a
// majority of all members counting this node (two of three) instead of a
// majority of the others, so that a node can check in, vote and serve
// when too few other members will ever come back (one of three lost for
// good and this one restarted), and the operator's removal of the lost
// members can commit. The members that answer still refuse a store older
// than the life or age they know; vouching for a restored copy they cannot
// tell from a restart may lose locks. It holds for this life only.
func (e *Election) VouchStore() error {
	switch {
	case e.stale != nil:
		return e.stale
	case e.p.Cluster == 0:
		return fmt.Errorf("%w: this node has no cluster yet", ErrNotReady)
	case e.checkedIn:
		return fmt.Errorf("%w: this node checked in already", ErrCheckedIn)
	case !slices.Contains(e.Members(), e.cfg.Node):
		return fmt.Errorf("%w: this node is not a member", ErrBadChange)
	}
	e.vouched = true
	e.updateCheckedIn()
	return nil
}

// vouchedQuorum: the store is vouched for and a majority of the members
// counting this node confirmed its life.
func (e *Election) vouchedQuorum() bool {
	if !e.vouched {
		return false
	}
	n := 1
	for _, id := range e.Members() {
		if id != e.cfg.Node && e.checkAcks[id] {
			n++
		}
	}
	return n >= Quorum(len(e.Members()))
}

func (e *Election) onCheckIn(m wire.Message) error {
	if m.Incarnation == 0 {
		e.stats.BadViews++
		return fmt.Errorf("%w: check-in of incarnation 0", ErrBadView)
	}
	life := Life{Incarnation: m.Incarnation, Nonce: m.Nonce}
	known, ok := e.p.Lives[m.From]
	ack := wire.Message{Kind: wire.KindCheckInAck, To: m.From, Incarnation: m.Incarnation, Nonce: m.Nonce}
	// The store remembers the life known here: it is one of the lives it
	// shows, or older than the newest it had confirmed (this member missed
	// the check-ins since).
	remembers := slices.Contains(m.Lives, known) ||
		!m.Unconfirmed && len(m.Lives) > 0 && known.Incarnation < m.Lives[0].Incarnation
	if e.cfg.Mutant.on(MutantClimbingLives) {
		remembers = true
	}
	// The store is older than the age its last life told in its hellos.
	var older mark
	if mk, ok := e.marks[m.From]; ok && len(m.Lives) > 0 && mk.inc == m.Lives[len(m.Lives)-1].Incarnation &&
		mk.writes > m.StoreAge && !e.cfg.Mutant.on(MutantNoWriteMarks) {
		older = mk
	}
	switch {
	case older.writes > 0:
		e.stats.StaleLives++
		ack.Reject, ack.KnownIncarnation, ack.KnownStoreAge = true, older.inc, older.writes
		e.send(ack)
		return fmt.Errorf("%w: node %d checked in as incarnation %d with a store of age %d, its incarnation %d told age %d",
			ErrStale, m.From, life.Incarnation, m.StoreAge, older.inc, older.writes)
	case !ok || life.Incarnation > known.Incarnation && remembers:
		if e.p.Lives == nil {
			e.p.Lives = map[wire.NodeID]Life{}
		}
		e.p.Lives[m.From], e.persist = life, true
	case life == known:
	default:
		e.stats.StaleLives++
		ack.Reject, ack.KnownIncarnation = true, known.Incarnation
		e.send(ack)
		return fmt.Errorf("%w: node %d checked in as incarnation %d (nonce %x), it ran as %d (nonce %x) before",
			ErrStale, m.From, life.Incarnation, life.Nonce, known.Incarnation, known.Nonce)
	}
	// The member's valid view goes with the ack: a node that restarts on
	// a copy whose level a link of codec 3 stripped gets it whole before
	// it checks in and hands the view out, whoever else greets it.
	ack.View = e.p.Valid.Clone()
	e.send(ack) // after the life is durable: the Ready contract
	return nil
}

func (e *Election) onCheckInAck(m wire.Message) error {
	if m.Incarnation != e.cfg.Incarnation || m.Nonce != e.cfg.Nonce {
		return nil // for an earlier life
	}
	if m.Reject {
		if e.cfg.Mutant.on(MutantNoCheckIn) {
			return nil
		}
		e.stale = &StaleError{By: m.From, Knows: m.KnownIncarnation, Mine: e.cfg.Incarnation, Seen: m.KnownStoreAge}
		if m.KnownStoreAge > 0 {
			e.stale.Store = e.startWrites
		}
		e.round, e.view = nil, nil
		e.endChange(e.stale)
		return e.stale
	}
	var err error
	if m.View.Epoch > 0 {
		if err = e.checkView(m.View, false); err == nil {
			err = e.learnView(m)
		}
	}
	e.checkAcks[m.From] = true
	e.updateCheckedIn()
	return err
}

// ChangeMembers starts a round that commits c: a view whose members are
// this node's valid view's members with one added or removed, accepted by
// a majority of the old members and of the new. Its end comes in
// Ready.Changes. It fails at once, changing nothing, when the node is not
// ready, another change is under way here, the node to add never said
// hello or is a member, the node to remove is not one, or the change
// could not commit with the members alive now.
func (e *Election) ChangeMembers(c Change) error {
	switch {
	case e.stale != nil:
		return fmt.Errorf("%w: %w", ErrNotReady, e.stale)
	case !e.checkedIn || e.p.Valid.Epoch == 0:
		return fmt.Errorf("%w: no valid view yet", ErrNotReady)
	case (c.Add == 0) == (c.Remove == 0):
		return fmt.Errorf("%w: add one node or remove one member", ErrBadChange)
	case e.round != nil && e.round.change != nil:
		return fmt.Errorf("%w: %s is under way", ErrBusy, e.round.change)
	}
	old := e.Members()
	next := slices.Clone(old)
	if c.Add != 0 {
		m := e.members[c.Add]
		switch {
		case slices.Contains(old, c.Add):
			return fmt.Errorf("%w: node %d is a member already", ErrBadChange, c.Add)
		case m == nil || m.id.Address == "":
			return fmt.Errorf("%w: node %d never said hello to this node: start it with --join first (one started, or restarted on either side, greets within seconds: try again)", ErrBadChange, c.Add)
		case len(old) >= wire.MaxMembers:
			return fmt.Errorf("%w: %d members is the most a cluster has", ErrBadChange, wire.MaxMembers)
		}
		if why := e.belowLevel(c.Add, e.p.Valid.Codec()); why != "" {
			return fmt.Errorf("%w: %s: it could not vote; upgrade it first", ErrBadChange, why)
		}
		next = append(next, c.Add)
		slices.Sort(next)
	} else {
		if !slices.Contains(old, c.Remove) {
			return fmt.Errorf("%w: node %d is not a member", ErrBadChange, c.Remove)
		}
		next = slices.DeleteFunc(next, func(id wire.NodeID) bool { return id == c.Remove })
		if len(next) == 0 {
			return fmt.Errorf("%w: removing node %d would leave no member", ErrBadChange, c.Remove)
		}
	}
	for _, set := range [][]wire.NodeID{old, next} {
		if up := e.aliveOf(set); up < Quorum(len(set)) {
			return fmt.Errorf("%w: %d of the members %v are up, and a change needs a majority (%d) of the old and of the new members: it could never commit",
				ErrBadChange, up, set, Quorum(len(set)))
		}
	}
	e.startRound(&c)
	return nil
}

func (e *Election) aliveOf(set []wire.NodeID) int {
	n := 0
	for _, id := range set {
		if e.alive(id) {
			n++
		}
	}
	return n
}

func (e *Election) endChange(err error) {
	if r := e.round; r != nil && r.change != nil {
		e.changes = append(e.changes, ChangeResult{Change: *r.change, Epoch: r.epoch, Err: err})
		r.change = nil
	}
}

// applyChange is the member set after c.
func applyChange(members []wire.NodeID, c *Change) []wire.NodeID {
	out := slices.Clone(members)
	if c == nil {
		return out
	}
	if c.Add != 0 && !slices.Contains(out, c.Add) {
		out = append(out, c.Add)
	}
	out = slices.DeleteFunc(out, func(id wire.NodeID) bool { return id == c.Remove })
	slices.Sort(out)
	return out
}

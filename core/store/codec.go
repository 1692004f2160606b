package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// version is the first byte of every value.
const version byte = 1

// Versions of the election record: 1 lacks the cluster, the bootstrap
// members, the views' members and the lives; Open still reads it, so a
// node upgraded in place keeps its votes.
const (
	electionV1 byte = 1
	electionV2 byte = 2
	// electionV3 adds this node's own lives (Confirmed, then Since) and
	// the record's age (Writes).
	electionV3 byte = 3
	// electionV4 adds the levels of the accepted and the valid view
	// (wire.View.Level). It is written only once a view has a level, so
	// the previous release, which reads up to electionV3, opens the store
	// until the cluster's codec moved, and refuses it after.
	electionV4 byte = 4
)

const (
	prefixName = 'n'
	prefixLed  = 'l'
	kindHigh   = 'h'
	kindTicket = 't'
	reqLen     = 16
)

var (
	keyFence    = []byte("m:fence")
	keyComplete = []byte("m:complete")
	keyFloor    = []byte("m:floor")
	keyInc      = []byte("m:inc")
	keyAge      = []byte("m:age")
	keyIdentity = []byte("m:identity")
	keyElection = []byte("m:election")
	keyFormat   = []byte("m:format")
	ledPrefix   = []byte{prefixLed}
	namePrefix  = []byte{prefixName}
)

// nameKey is "n" + escaped name + 0x00 0x01, the common prefix of a name's keys.
func nameKey(name string) []byte {
	k := make([]byte, 0, 1+len(name)+2+1+reqLen)
	k = append(k, prefixName)
	for i := 0; i < len(name); i++ {
		k = append(k, name[i])
		if name[i] == 0 {
			k = append(k, 0xFF)
		}
	}
	return append(k, 0, 1)
}

func highKey(name string) []byte { return append(nameKey(name), kindHigh) }

func ticketKey(name string, req wire.RequestID) []byte {
	k := append(nameKey(name), kindTicket)
	k = binary.BigEndian.AppendUint64(k, uint64(req.Node))
	return binary.BigEndian.AppendUint64(k, req.Seq)
}

func ledKey(epoch uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixLed}, epoch)
}

// parseNameKey splits a key of prefix "n" into the name and the rest after
// the terminator.
func parseNameKey(k []byte) (string, []byte, error) {
	if len(k) == 0 || k[0] != prefixName {
		return "", nil, corrupt(k, "not a name key")
	}
	for i := 1; i < len(k); i++ {
		if k[i] != 0 {
			continue
		}
		if i+1 >= len(k) {
			return "", nil, corrupt(k, "truncated name")
		}
		switch k[i+1] {
		case 0x01:
			return unescape(k[1:i]), k[i+2:], nil
		case 0xFF:
			i++
		default:
			return "", nil, corrupt(k, "bad name escape")
		}
	}
	return "", nil, corrupt(k, "unterminated name")
}

func unescape(b []byte) string {
	return string(bytes.ReplaceAll(b, []byte{0, 0xFF}, []byte{0}))
}

// nameEntry is what a key of prefix "n" holds: a high-water mark, or a ticket.
type nameEntry struct {
	name   string
	high   bool
	req    wire.RequestID
	ticket core.DurableTicket
	value  uint64
}

func decodeNameEntry(k, v []byte) (nameEntry, error) {
	name, rest, err := parseNameKey(k)
	if err != nil {
		return nameEntry{}, err
	}
	e := nameEntry{name: name}
	switch {
	case len(rest) == 1 && rest[0] == kindHigh:
		e.high = true
		e.value, err = decodeUint(k, v)
	case len(rest) == 1+reqLen && rest[0] == kindTicket:
		e.req = wire.RequestID{Node: wire.NodeID(binary.BigEndian.Uint64(rest[1:])), Seq: binary.BigEndian.Uint64(rest[9:])}
		e.ticket, err = decodeTicket(k, v, e.req)
	default:
		err = corrupt(k, "bad name key suffix")
	}
	return e, err
}

func corrupt(k []byte, why string) error {
	return fmt.Errorf("%w: key %q: %s", ErrCorrupt, k, why)
}

func encodeUint(x uint64) []byte {
	return binary.AppendUvarint([]byte{version}, x)
}

func decodeUint(k, v []byte) (uint64, error) {
	r := reader{k: k, b: v}
	r.version()
	x := r.uvarint()
	return x, r.done()
}

func encodeTicket(e wire.Entry, lifetime int64) []byte {
	b := make([]byte, 0, 24)
	b = append(b, version)
	b = binary.AppendUvarint(b, e.Ticket)
	var flags byte
	if e.Active {
		flags = 1
	}
	b = append(b, byte(e.Mode), byte(e.State), flags)
	return binary.AppendVarint(b, lifetime)
}

func decodeTicket(k, v []byte, req wire.RequestID) (core.DurableTicket, error) {
	r := reader{k: k, b: v}
	r.version()
	t := core.DurableTicket{Entry: wire.Entry{Req: req}}
	t.Entry.Ticket = r.uvarint()
	t.Entry.Mode = wire.Mode(r.byte())
	t.Entry.State = wire.EntryState(r.byte())
	switch flags := r.byte(); flags {
	case 0:
	case 1:
		t.Entry.Active = true
	default:
		r.fail("bad ticket flags")
	}
	t.Lifetime = r.varint()
	return t, r.done()
}

func appendView(b []byte, epoch uint64, leaders []wire.NodeID, prevEpoch uint64, prev []wire.NodeID) []byte {
	b = binary.AppendUvarint(b, epoch)
	b = appendNodes(b, leaders)
	b = binary.AppendUvarint(b, prevEpoch)
	return appendNodes(b, prev)
}

func appendNodes(b []byte, ids []wire.NodeID) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(id))
	}
	return b
}

func encodeLed(v wire.View) []byte {
	return appendView([]byte{version}, v.Epoch, v.Leaders, v.PrevEpoch, v.PrevLeaders)
}

func decodeLed(k, v []byte) (wire.View, error) {
	if len(k) != 9 || k[0] != prefixLed {
		return wire.View{}, corrupt(k, "bad led view key")
	}
	r := reader{k: k, b: v}
	r.version()
	var view wire.View
	view.Epoch, view.Leaders, view.PrevEpoch, view.PrevLeaders = r.view()
	if err := r.done(); err != nil {
		return wire.View{}, err
	}
	if view.Epoch != binary.BigEndian.Uint64(k[1:]) {
		return wire.View{}, corrupt(k, "led view epoch differs from its key")
	}
	return view, nil
}

func encodeElection(p *ElectionRecord) []byte {
	ver := electionV3
	if p.Accepted.Level != 0 || p.Valid.Level != 0 {
		ver = electionV4
	}
	b := binary.AppendUvarint([]byte{ver}, p.Cluster)
	b = appendNodes(b, p.Bootstrap)
	b = binary.AppendUvarint(b, p.Promised)
	for _, v := range []*wire.View{&p.Accepted, &p.Valid} {
		b = appendView(b, v.Epoch, v.Leaders, v.PrevEpoch, v.PrevLeaders)
		b = appendNodes(b, v.Members)
		b = appendNodes(b, v.PrevMembers)
	}
	// In node order, so that equal records encode to equal bytes.
	b = binary.AppendUvarint(b, uint64(len(p.Lives)))
	for _, id := range slices.Sorted(maps.Keys(p.Lives)) {
		l := p.Lives[id]
		b = binary.AppendUvarint(b, uint64(id))
		b = binary.AppendUvarint(b, uint64(l.Incarnation))
		b = binary.AppendUvarint(b, l.Nonce)
	}
	b = binary.AppendUvarint(binary.AppendUvarint(b, uint64(p.Confirmed.Incarnation)), p.Confirmed.Nonce)
	b = binary.AppendUvarint(b, uint64(len(p.Since)))
	for _, l := range p.Since {
		b = binary.AppendUvarint(binary.AppendUvarint(b, uint64(l.Incarnation)), l.Nonce)
	}
	b = binary.AppendUvarint(b, p.Writes)
	if ver == electionV4 {
		b = binary.AppendUvarint(binary.AppendUvarint(b, p.Accepted.Level), p.Valid.Level)
	}
	return b
}

func decodeElection(k, v []byte) (*ElectionRecord, error) {
	r := reader{k: k, b: v}
	ver := r.versionOf(electionV1, electionV2, electionV3, electionV4)
	p := &ElectionRecord{}
	if ver >= electionV2 {
		p.Cluster = r.uvarint()
		p.Bootstrap = r.nodes()
	}
	p.Promised = r.uvarint()
	for _, view := range []*wire.View{&p.Accepted, &p.Valid} {
		view.Epoch, view.Leaders, view.PrevEpoch, view.PrevLeaders = r.view()
		if ver >= electionV2 {
			view.Members = r.nodes()
			view.PrevMembers = r.nodes()
		}
	}
	if ver >= electionV2 {
		p.Lives = r.lives()
	}
	if ver >= electionV3 {
		p.Confirmed = r.life()
		n := r.uvarint()
		if n > wire.MaxLives || n > uint64(len(r.b))/2 {
			r.fail("own lives over their cap")
		}
		for range n {
			if r.err != nil {
				break
			}
			p.Since = append(p.Since, r.life())
		}
		p.Writes = r.uvarint()
	}
	if ver >= electionV4 {
		p.Accepted.Level, p.Valid.Level = r.uvarint(), r.uvarint()
		if p.Accepted.Level == 0 && p.Valid.Level == 0 {
			r.fail("levels of a record that has them are zero")
		}
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return p, nil
}

func decodeInc(k, v []byte) (uint32, error) {
	x, err := decodeUint(k, v)
	if err == nil && x > math.MaxUint32 {
		err = corrupt(k, "incarnation over 32 bits")
	}
	return uint32(x), err
}

// reader decodes a value strictly; after the first failure every read
// returns zero and done reports the failure.
type reader struct {
	k, b []byte
	err  error
}

func (r *reader) fail(why string) {
	if r.err == nil {
		r.err = corrupt(r.k, why)
	}
	r.b = nil
}

func (r *reader) version() { r.versionOf(version) }

// versionOf reads the version byte, which must be one of known, and
// returns it (0 after a failure).
func (r *reader) versionOf(known ...byte) byte {
	switch {
	case len(r.b) == 0:
		r.fail("empty value")
	case !slices.Contains(known, r.b[0]):
		r.fail(fmt.Sprintf("unknown value version %d", r.b[0]))
	default:
		v := r.b[0]
		r.b = r.b[1:]
		return v
	}
	return 0
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail("truncated value")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad or truncated uvarint")
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *reader) varint() int64 {
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad or truncated varint")
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *reader) nodes() []wire.NodeID {
	n := r.uvarint()
	// Each id takes at least one byte: a larger count is corrupt, and
	// checking first keeps garbage from sizing an allocation.
	if n > uint64(len(r.b)) {
		r.fail("node count over value size")
		return nil
	}
	if n == 0 {
		return nil
	}
	ids := make([]wire.NodeID, n)
	for i := range ids {
		ids[i] = wire.NodeID(r.uvarint())
	}
	return ids
}

// lives reads the lives of an election record: node ids strictly
// increasing, so that a record has one encoding and no node twice.
func (r *reader) life() wire.Life {
	inc, nonce := r.uvarint(), r.uvarint()
	if inc > math.MaxUint32 {
		r.fail("incarnation over 32 bits")
	}
	return wire.Life{Incarnation: uint32(inc), Nonce: nonce}
}

func (r *reader) lives() map[wire.NodeID]wire.Life {
	n := r.uvarint()
	// Each life takes at least three bytes: see nodes.
	if n > uint64(len(r.b))/3 {
		r.fail("life count over value size")
		return nil
	}
	if n == 0 {
		return nil
	}
	lives := make(map[wire.NodeID]wire.Life, n)
	var last wire.NodeID
	for i := range n {
		id := wire.NodeID(r.uvarint())
		inc := r.uvarint()
		nonce := r.uvarint()
		switch {
		case r.err != nil:
			return nil
		case i > 0 && id <= last:
			r.fail("lives not in node order")
			return nil
		case inc > math.MaxUint32:
			r.fail("incarnation over 32 bits")
			return nil
		}
		lives[id], last = wire.Life{Incarnation: uint32(inc), Nonce: nonce}, id
	}
	return lives
}

func (r *reader) view() (epoch uint64, leaders []wire.NodeID, prevEpoch uint64, prev []wire.NodeID) {
	epoch = r.uvarint()
	leaders = r.nodes()
	prevEpoch = r.uvarint()
	prev = r.nodes()
	return
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	return r.err
}

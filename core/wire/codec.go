package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the codec version, the first byte of every encoded message.
const Version byte = 2

// Caps on what a peer may send. They bound memory per frame, not policy:
// the core applies its own, smaller limits on names and waiters.
const (
	MaxFrameSize = 1 << 20
	MaxNameLen   = 1024
	MaxEntries   = 8192
)

var (
	// ErrMalformed is wrapped by every decoding failure.
	ErrMalformed = errors.New("wire: malformed message")
	// ErrTooLarge: the frame or one of its fields is over its cap.
	ErrTooLarge = fmt.Errorf("%w: over size cap", ErrMalformed)
	// ErrVersion: the frame was written by an unknown codec version.
	ErrVersion = fmt.Errorf("%w: unknown codec version", ErrMalformed)
	// ErrKind: the frame names an unknown message kind.
	ErrKind = fmt.Errorf("%w: unknown message kind", ErrMalformed)
)

// Encode appends the binary form of m to dst. It fails only when m breaks a
// cap, so a peer never receives a frame it must reject for size.
func Encode(dst []byte, m *Message) ([]byte, error) {
	if len(m.Name) > MaxNameLen {
		return dst, fmt.Errorf("%w: name of %d bytes", ErrTooLarge, len(m.Name))
	}
	if len(m.Entries) > MaxEntries {
		return dst, fmt.Errorf("%w: %d entries", ErrTooLarge, len(m.Entries))
	}
	if len(m.View.Leaders) > MaxLeaders || len(m.View.PrevLeaders) > MaxLeaders {
		return dst, fmt.Errorf("%w: view of %d leaders", ErrTooLarge, max(len(m.View.Leaders), len(m.View.PrevLeaders)))
	}
	if len(m.View.Members) > MaxMembers || len(m.View.PrevMembers) > MaxMembers {
		return dst, fmt.Errorf("%w: view of %d members", ErrTooLarge, max(len(m.View.Members), len(m.View.PrevMembers)))
	}
	if len(m.Lives) > MaxLives {
		return dst, fmt.Errorf("%w: %d lives", ErrTooLarge, len(m.Lives))
	}
	start := len(dst)
	dst = append(dst, Version, byte(m.Kind))
	for _, v := range [...]uint64{uint64(m.From), uint64(m.To), m.Epoch, m.Clock} {
		dst = binary.AppendUvarint(dst, v)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.Name)))
	dst = append(dst, m.Name...)
	dst = appendReq(dst, m.Req)
	dst = append(dst, byte(m.Mode))
	for _, v := range [...]uint64{m.Ticket, m.Inc, m.Seq, m.Lifetime} {
		dst = binary.AppendUvarint(dst, v)
	}
	var reject byte
	if m.Reject {
		reject = 1
	}
	dst = append(dst, reject, byte(m.Event), byte(m.Code))
	dst = binary.AppendUvarint(dst, uint64(len(m.Entries)))
	for _, e := range m.Entries {
		dst = appendReq(dst, e.Req)
		dst = binary.AppendUvarint(dst, e.Ticket)
		var flags byte
		if e.Active {
			flags = 1
		}
		dst = append(dst, byte(e.Mode), byte(e.State), flags)
	}
	dst = appendNodes(binary.AppendUvarint(dst, m.View.Epoch), m.View.Leaders)
	dst = appendNodes(binary.AppendUvarint(dst, m.View.PrevEpoch), m.View.PrevLeaders)
	dst = appendNodes(dst, m.View.Members)
	dst = appendNodes(dst, m.View.PrevMembers)
	for _, v := range [...]uint64{m.Cluster, m.Size, m.Nonce} {
		dst = binary.AppendUvarint(dst, v)
	}
	// Last, and only when there are some: a frame of a node that does not
	// know the field yet decodes as none.
	if len(m.Lives) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(m.Lives)))
		for _, l := range m.Lives {
			dst = binary.AppendUvarint(binary.AppendUvarint(dst, uint64(l.Incarnation)), l.Nonce)
		}
	}
	if len(dst)-start > MaxFrameSize {
		return dst[:start], fmt.Errorf("%w: %d bytes", ErrTooLarge, len(dst)-start)
	}
	return dst, nil
}

func appendNodes(dst []byte, ids []NodeID) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ids)))
	for _, id := range ids {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	return dst
}

func appendReq(dst []byte, r RequestID) []byte {
	dst = binary.AppendUvarint(dst, uint64(r.Node))
	return binary.AppendUvarint(dst, r.Seq)
}

// decoder reads fields in order and remembers the first failure, so Decode
// reads as a straight list of fields.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or bad %s", ErrMalformed, what)
	}
}

func (d *decoder) byte(what string) byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail(what)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) nodes(what string, limit uint64) []NodeID {
	n := d.uvarint(what)
	if d.err != nil || n == 0 {
		return nil
	}
	if n > limit || n > uint64(len(d.b)) {
		d.fail(what)
		return nil
	}
	ids := make([]NodeID, n)
	for i := range ids {
		ids[i] = NodeID(d.uvarint(what))
	}
	return ids
}

func (d *decoder) lives() []Life {
	n := d.uvarint("lives")
	if d.err != nil {
		return nil
	}
	// Each life takes at least two bytes.
	if n == 0 || n > MaxLives || n > uint64(len(d.b))/2 {
		d.fail("lives")
		return nil
	}
	lives := make([]Life, n)
	for i := range lives {
		inc := d.uvarint("life incarnation")
		if inc > 1<<32-1 {
			d.fail("life incarnation")
		}
		lives[i] = Life{Incarnation: uint32(inc), Nonce: d.uvarint("life nonce")}
	}
	return lives
}

func (d *decoder) req(what string) RequestID {
	return RequestID{Node: NodeID(d.uvarint(what)), Seq: d.uvarint(what)}
}

// Decode parses one message. It rejects, with an error wrapping ErrMalformed,
// anything over a cap, any unknown version, kind, mode, state, event or code,
// and trailing bytes.
func Decode(b []byte) (Message, error) {
	var m Message
	if len(b) > MaxFrameSize {
		return m, fmt.Errorf("%w: frame of %d bytes", ErrTooLarge, len(b))
	}
	d := decoder{b: b}
	if v := d.byte("version"); d.err == nil && v != Version {
		return m, fmt.Errorf("%w: %d", ErrVersion, v)
	}
	m.Kind = Kind(d.byte("kind"))
	if d.err == nil && !m.Kind.Valid() {
		return m, fmt.Errorf("%w: %d", ErrKind, uint8(m.Kind))
	}
	m.From = NodeID(d.uvarint("from"))
	m.To = NodeID(d.uvarint("to"))
	m.Epoch = d.uvarint("epoch")
	m.Clock = d.uvarint("clock")
	n := d.uvarint("name length")
	if d.err == nil {
		if n > MaxNameLen {
			return Message{}, fmt.Errorf("%w: name of %d bytes", ErrTooLarge, n)
		}
		if uint64(len(d.b)) < n {
			d.fail("name")
		} else {
			m.Name = string(d.b[:n])
			d.b = d.b[n:]
		}
	}
	m.Req = d.req("request id")
	m.Mode = Mode(d.byte("mode"))
	m.Ticket = d.uvarint("ticket")
	m.Inc = d.uvarint("incarnation")
	m.Seq = d.uvarint("sequence")
	m.Lifetime = d.uvarint("lifetime")
	switch d.byte("reject") {
	case 0:
	case 1:
		m.Reject = true
	default:
		d.fail("reject flag")
	}
	m.Event = EventKind(d.byte("event"))
	m.Code = Code(d.byte("code"))
	count := d.uvarint("entry count")
	if d.err == nil && count > MaxEntries {
		return Message{}, fmt.Errorf("%w: %d entries", ErrTooLarge, count)
	}
	// Each entry takes at least 6 bytes; a count the frame cannot hold is a lie.
	if d.err == nil && count > uint64(len(d.b))/6 {
		d.fail("entry count")
	}
	if d.err == nil && count > 0 {
		m.Entries = make([]Entry, count)
		for i := range m.Entries {
			e := &m.Entries[i]
			e.Req = d.req("entry request id")
			e.Ticket = d.uvarint("entry ticket")
			e.Mode = Mode(d.byte("entry mode"))
			e.State = EntryState(d.byte("entry state"))
			switch d.byte("entry flags") {
			case 0:
			case 1:
				e.Active = true
			default:
				d.fail("entry flags")
			}
			if d.err == nil && (!e.Mode.Valid() || e.State == 0 || e.State >= stateEnd) {
				d.fail("entry mode or state")
			}
		}
	}
	m.View.Epoch = d.uvarint("view epoch")
	m.View.Leaders = d.nodes("view leaders", MaxLeaders)
	m.View.PrevEpoch = d.uvarint("previous view epoch")
	m.View.PrevLeaders = d.nodes("previous view leaders", MaxLeaders)
	m.View.Members = d.nodes("view members", MaxMembers)
	m.View.PrevMembers = d.nodes("previous view members", MaxMembers)
	m.Cluster = d.uvarint("cluster")
	m.Size = d.uvarint("cluster size")
	m.Nonce = d.uvarint("nonce")
	if d.err == nil && len(d.b) > 0 {
		m.Lives = d.lives()
	}
	if d.err != nil {
		return Message{}, d.err
	}
	if len(d.b) != 0 {
		return Message{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(d.b))
	}
	if m.Mode != 0 && !m.Mode.Valid() {
		return Message{}, fmt.Errorf("%w: mode %d", ErrMalformed, m.Mode)
	}
	if m.Event >= eventEnd || m.Code >= codeEnd {
		return Message{}, fmt.Errorf("%w: event %d code %d", ErrMalformed, m.Event, m.Code)
	}
	return m, nil
}

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// Codec versions: the first byte of every frame. Version is what this
// build writes to a peer that reads it; MinVersion, the oldest it still
// reads and writes, is the codec of the previous release, so that a
// cluster can be upgraded one agent at a time. Codec 4 writes each field
// under a key that gives its tag, its wire type and whether a reader must
// understand it: a reader skips a field it does not know unless it is
// marked so. Codec 3 wrote each field's tag alone, and refused any tag it
// did not know.
const (
	Version    byte = 4
	MinVersion byte = 3
)

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
	// ErrVersion: the frame was written by a codec this build does not
	// read (a newer one, or one older than the previous release's).
	ErrVersion = fmt.Errorf("%w: unknown codec version", ErrMalformed)
	// ErrKind: the frame names an unknown message kind. A kind is always
	// to be understood: a sender uses a new kind only with a peer whose
	// codec has it.
	ErrKind = fmt.Errorf("%w: unknown message kind", ErrMalformed)
	// ErrMustUnderstand: the frame holds a field this build does not know
	// and its writer marked as one the reader must understand.
	ErrMustUnderstand = fmt.Errorf("%w: a field that must be understood is unknown", ErrMalformed)
)

// The wire types of codec 4, the low two bits of a field's key; the next
// bit marks a field the reader must understand, and the tag is above.
const (
	typeVarint     = 0 // a uvarint
	typeFlag       = 1 // no value: the key alone says true
	typeBytes      = 2 // a uvarint length, then that many bytes
	mustUnderstand = 1 << 2
	keyShift       = 3
)

// A frame is the version, the kind, then the fields that are set, in tag
// order (a field's tag is its place in fields plus one). In codec 4 each
// is its key (a uvarint: tag<<3 | must-understand<<2 | wire type) and its
// value as the type says; in codec 3 it was its tag and its value, which
// only a reader that knows the tag can find the end of. A field that is
// not set is not written: a frame holds only what its kind uses, and a
// decoder takes a missing field as zero.

// field is one field of Message on the wire.
type field struct {
	name string
	// put appends the value; ok is false when the field is not set (zero),
	// and then nothing was appended.
	put func(dst []byte, m *Message) (out []byte, ok bool)
	// get reads the value into m; errors go to d.
	get func(d *decoder, m *Message)
	// show is the value for Message.String; "" for fields it prints its
	// own way.
	show func(m *Message) string
	// typ is the field's wire type in codec 4; a value that is neither a
	// number nor a flag goes as typeBytes, its codec 3 form inside.
	typ byte
	// critical marks a field an older reader must not skip: one that
	// changes what the rest of the message means. Fields added after
	// codec 4 set it when skipping them would be unsafe.
	critical bool
}

// fields are the fields after the kind, in tag order. Append new fields at
// the end: a tag never changes its meaning within a Version.
var fields = [...]field{
	number("from", func(m *Message) *NodeID { return &m.From }),
	number("to", func(m *Message) *NodeID { return &m.To }),
	number("epoch", func(m *Message) *uint64 { return &m.Epoch }),
	number("clock", func(m *Message) *uint64 { return &m.Clock }),
	text("name", func(m *Message) *string { return &m.Name }),
	{name: "request", typ: typeBytes, put: putReq, get: getReq},
	{name: "mode", typ: typeBytes, put: putMode, get: getMode, show: func(m *Message) string { return m.Mode.String() }},
	number("ticket", func(m *Message) *uint64 { return &m.Ticket }),
	number("high-water", func(m *Message) *uint64 { return &m.HighWater }),
	number("incarnation", func(m *Message) *uint32 { return &m.Incarnation }),
	number("lifetime", func(m *Message) *uint64 { return &m.Lifetime }),
	flag("reject", func(m *Message) *bool { return &m.Reject }),
	flag("held", func(m *Message) *bool { return &m.Held }),
	{name: "code", typ: typeBytes, put: putCode, get: getCode, show: func(m *Message) string { return m.Code.String() }},
	{name: "entries", typ: typeBytes, put: putEntries, get: getEntries},
	number("watch-seq", func(m *Message) *uint64 { return &m.WatchSeq }),
	number("report-seq", func(m *Message) *uint64 { return &m.ReportSeq }),
	number("readers-ago", func(m *Message) *uint64 { return &m.ReadersAgo }),
	number("round", func(m *Message) *uint64 { return &m.Round }),
	{name: "view", typ: typeBytes, put: putView, get: getView},
	text("election-id", func(m *Message) *string { return &m.ElectionID }),
	number("prepare-epoch", func(m *Message) *uint64 { return &m.PrepareEpoch }),
	number("promised", func(m *Message) *uint64 { return &m.Promised }),
	number("cluster", func(m *Message) *uint64 { return &m.Cluster }),
	number("cluster-size", func(m *Message) *uint64 { return &m.ClusterSize }),
	number("nonce", func(m *Message) *uint64 { return &m.Nonce }),
	number("store-age", func(m *Message) *uint64 { return &m.StoreAge }),
	{name: "lives", typ: typeBytes, put: putLives, get: getLives},
	flag("unconfirmed", func(m *Message) *bool { return &m.Unconfirmed }),
	number("known-incarnation", func(m *Message) *uint32 { return &m.KnownIncarnation }),
	number("known-store-age", func(m *Message) *uint64 { return &m.KnownStoreAge }),
	number("snapshot", func(m *Message) *uint64 { return &m.SnapshotID }),
	number("snapshot-since", func(m *Message) *uint64 { return &m.SnapshotSince }),
	number("answer", func(m *Message) *uint64 { return &m.Answer }),
	number("answer-size", func(m *Message) *uint64 { return &m.AnswerSize }),
	number("handoff-epoch", func(m *Message) *uint64 { return &m.HandoffEpoch }),
	number("base-seq", func(m *Message) *uint64 { return &m.BaseSeq }),
	flag("try", func(m *Message) *bool { return &m.Try }),
	number("yield", func(m *Message) *Yield { return &m.Yield }),
	flag("shared", func(m *Message) *bool { return &m.Shared }),
	// Added in codec 4: a reader of codec 3 never sees them.
	number("view-level", func(m *Message) *uint64 { return &m.View.Level }),
	number("codec", func(m *Message) *uint64 { return &m.Codec }),
	text("release", func(m *Message) *string { return &m.Release }),
}

// lastCodec3Tag is the newest field codec 3 has: a field added after it
// is not written in codec 3, whose readers refuse any tag they do not know.
const lastCodec3Tag = 40

// number is a field holding an unsigned integer; a value over the type's
// range is malformed.
func number[T ~uint32 | ~uint64](name string, at func(*Message) *T) field {
	limit := uint64(^T(0))
	return field{
		name: name, typ: typeVarint,
		put: func(dst []byte, m *Message) ([]byte, bool) {
			v := uint64(*at(m))
			return binary.AppendUvarint(dst, v), v != 0
		},
		get: func(d *decoder, m *Message) {
			if v := d.uvarint(name); v <= limit {
				*at(m) = T(v)
			} else {
				d.fail(name)
			}
		},
		show: func(m *Message) string { return strconv.FormatUint(uint64(*at(m)), 10) },
	}
}

// flag is a boolean field: its tag alone says true.
func flag(name string, at func(*Message) *bool) field {
	return field{
		name: name, typ: typeFlag,
		put:  func(dst []byte, m *Message) ([]byte, bool) { return dst, *at(m) },
		get:  func(_ *decoder, m *Message) { *at(m) = true },
		show: func(*Message) string { return "true" },
	}
}

// text is a string field of at most MaxNameLen bytes.
func text(name string, at func(*Message) *string) field {
	return field{
		name: name, typ: typeBytes,
		put: func(dst []byte, m *Message) ([]byte, bool) {
			s := *at(m)
			return append(binary.AppendUvarint(dst, uint64(len(s))), s...), s != ""
		},
		get: func(d *decoder, m *Message) {
			n := d.uvarint(name + " length")
			switch {
			case d.err != nil:
			case n > MaxNameLen:
				d.failWith(fmt.Errorf("%w: %s of %d bytes", ErrTooLarge, name, n))
			case uint64(len(d.b)) < n:
				d.fail(name)
			default:
				*at(m) = string(d.b[:n])
				d.b = d.b[n:]
			}
		},
		show: func(m *Message) string { return strconv.Quote(*at(m)) },
	}
}

func putReq(dst []byte, m *Message) ([]byte, bool) {
	return appendReq(dst, m.Req), m.Req != RequestID{}
}

func getReq(d *decoder, m *Message) { m.Req = d.req("request id") }

func putMode(dst []byte, m *Message) ([]byte, bool) { return append(dst, byte(m.Mode)), m.Mode != 0 }

func getMode(d *decoder, m *Message) { m.Mode = d.mode("mode") }

func putCode(dst []byte, m *Message) ([]byte, bool) { return append(dst, byte(m.Code)), m.Code != 0 }

func getCode(d *decoder, m *Message) {
	if m.Code = Code(d.byte("code")); d.err == nil && m.Code >= codeEnd {
		d.fail("code")
	}
}

func putEntries(dst []byte, m *Message) ([]byte, bool) {
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
	return dst, len(m.Entries) > 0
}

func getEntries(d *decoder, m *Message) {
	count := d.uvarint("entry count")
	switch {
	case d.err != nil:
		return
	case count > MaxEntries:
		d.failWith(fmt.Errorf("%w: %d entries", ErrTooLarge, count))
		return
	case count == 0 || count > uint64(len(d.b))/6:
		// Each entry takes at least 6 bytes; a count the frame cannot hold
		// is a lie, and an empty list is not written.
		d.fail("entry count")
		return
	}
	m.Entries = make([]Entry, count)
	for i := range m.Entries {
		e := &m.Entries[i]
		e.Req = d.req("entry request id")
		e.Ticket = d.uvarint("entry ticket")
		e.Mode = d.mode("entry mode")
		e.State = EntryState(d.byte("entry state"))
		switch d.byte("entry flags") {
		case 0:
		case 1:
			e.Active = true
		default:
			d.fail("entry flags")
		}
		if d.err == nil && (e.State == 0 || e.State >= stateEnd) {
			d.fail("entry state")
		}
	}
}

func putView(dst []byte, m *Message) ([]byte, bool) {
	v := &m.View
	dst = appendNodes(binary.AppendUvarint(dst, v.Epoch), v.Leaders)
	dst = appendNodes(binary.AppendUvarint(dst, v.PrevEpoch), v.PrevLeaders)
	dst = appendNodes(dst, v.Members)
	return appendNodes(dst, v.PrevMembers), v.Epoch != 0 || v.PrevEpoch != 0 ||
		len(v.Leaders)+len(v.PrevLeaders)+len(v.Members)+len(v.PrevMembers) > 0
}

func getView(d *decoder, m *Message) {
	v := &m.View
	v.Epoch = d.uvarint("view epoch")
	v.Leaders = d.nodes("view leaders", MaxLeaders)
	v.PrevEpoch = d.uvarint("previous view epoch")
	v.PrevLeaders = d.nodes("previous view leaders", MaxLeaders)
	v.Members = d.nodes("view members", MaxMembers)
	v.PrevMembers = d.nodes("previous view members", MaxMembers)
}

func putLives(dst []byte, m *Message) ([]byte, bool) {
	dst = binary.AppendUvarint(dst, uint64(len(m.Lives)))
	for _, l := range m.Lives {
		dst = binary.AppendUvarint(binary.AppendUvarint(dst, uint64(l.Incarnation)), l.Nonce)
	}
	return dst, len(m.Lives) > 0
}

func getLives(d *decoder, m *Message) {
	n := d.uvarint("lives")
	if d.err != nil {
		return
	}
	// Each life takes at least two bytes; an empty list is not written.
	if n == 0 || n > MaxLives || n > uint64(len(d.b))/2 {
		d.fail("lives")
		return
	}
	m.Lives = make([]Life, n)
	for i := range m.Lives {
		inc := d.uvarint("life incarnation")
		if inc > 1<<32-1 {
			d.fail("life incarnation")
		}
		m.Lives[i] = Life{Incarnation: uint32(inc), Nonce: d.uvarint("life nonce")}
	}
}

// Encode appends the binary form of m to dst in codec Version. It fails
// only when m breaks a cap, so a peer never receives a frame it must
// reject for size.
func Encode(dst []byte, m *Message) ([]byte, error) { return EncodeVersion(dst, m, Version) }

// Lossy reports whether m in codec v leaves out a field m sets: one codec v
// does not have (in codec 3, the view's level, a hello's codec and
// release), or shows a ticket in another mode (an intent mode). A transport must not hand such a frame to a reader of a newer
// codec, which would take the missing field for zero: a view without its
// level, for one.
func Lossy(m *Message, v byte) bool {
	if v != 3 {
		return false
	}
	if slices.ContainsFunc(m.Entries, func(e Entry) bool { return e.Mode.Intent() }) {
		return true // written as codec 3's nearest modes (codec3Entries)
	}
	var scratch [16]byte
	for i := lastCodec3Tag; i < len(fields); i++ {
		if _, set := fields[i].put(scratch[:0], m); set {
			return true
		}
	}
	return false
}

// EncodeVersion is Encode in codec v, MinVersion to Version: the transport
// writes to each peer in the newest codec both ends read.
func EncodeVersion(dst []byte, m *Message, v byte) ([]byte, error) {
	if v < MinVersion || v > Version {
		return dst, fmt.Errorf("%w: %d (this build writes %d to %d)", ErrVersion, v, MinVersion, Version)
	}
	if err := checkCaps(m); err != nil {
		return dst, err
	}
	if v == 3 {
		if m.Mode.Intent() {
			return dst, fmt.Errorf("%w: mode %s is not in codec 3", ErrVersion, m.Mode)
		}
		if entries, ok := codec3Entries(m.Entries); !ok {
			c := *m
			c.Entries, m = entries, &c
		}
	}
	start := len(dst)
	dst = append(dst, v, byte(m.Kind))
	for i := range fields {
		f := &fields[i]
		if v == 3 && i+1 > lastCodec3Tag {
			break // codec 3 readers refuse a tag they do not know
		}
		mark := len(dst)
		if v == 3 {
			dst = binary.AppendUvarint(dst, uint64(i+1))
		} else {
			dst = binary.AppendUvarint(dst, f.key(i+1))
		}
		body := len(dst)
		if v > 3 && f.typ == typeBytes {
			dst = append(dst, 0) // room for a short length
		}
		var set bool
		if dst, set = f.put(dst, m); !set {
			dst = dst[:mark]
			continue
		}
		if v > 3 && f.typ == typeBytes {
			dst = putLength(dst, body)
		}
	}
	if len(dst)-start > MaxFrameSize {
		return dst[:start], fmt.Errorf("%w: %d bytes", ErrTooLarge, len(dst)-start)
	}
	return dst, nil
}

// codec3Entries is entries as a codec 3 reader (a 0.8 agent watching a
// name) can take them, and whether they were so already: an
// INTENT_SHARED ticket is shown as READ_ONLY and an INTENT_EXCLUSIVE one
// as READ_WRITE_PRIORITY, the codec 3 modes that keep out at least what
// they keep out. Such a reader only orders its own requests by them; the
// tickets themselves are decided by masters that read codec 4.
func codec3Entries(entries []Entry) ([]Entry, bool) {
	if !slices.ContainsFunc(entries, func(e Entry) bool { return e.Mode.Intent() }) {
		return entries, true
	}
	out := slices.Clone(entries)
	for i := range out {
		switch out[i].Mode {
		case ModeIntentShared:
			out[i].Mode = ModeReadOnly
		case ModeIntentExclusive:
			out[i].Mode = ModeReadWritePriority
		}
	}
	return out, false
}

// key is the field's codec 4 key under tag.
func (f *field) key(tag int) uint64 {
	k := uint64(tag)<<keyShift | uint64(f.typ)
	if f.critical {
		k |= mustUnderstand
	}
	return k
}

// putLength writes the length of the value after the byte at at, which
// was left for it, widening it when the length takes more than a byte.
func putLength(dst []byte, at int) []byte {
	n := len(dst) - at - 1
	var pre [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(pre[:], uint64(n))
	if k > 1 {
		dst = append(dst, pre[1:k]...)
		copy(dst[at+k:], dst[at+1:at+1+n])
	}
	copy(dst[at:], pre[:k])
	return dst
}

func checkCaps(m *Message) error {
	switch {
	case len(m.Name) > MaxNameLen || len(m.ElectionID) > MaxNameLen || len(m.Release) > MaxNameLen:
		return fmt.Errorf("%w: name of %d bytes", ErrTooLarge, max(len(m.Name), len(m.ElectionID), len(m.Release)))
	case len(m.Entries) > MaxEntries:
		return fmt.Errorf("%w: %d entries", ErrTooLarge, len(m.Entries))
	case len(m.View.Leaders) > MaxLeaders || len(m.View.PrevLeaders) > MaxLeaders:
		return fmt.Errorf("%w: view of %d leaders", ErrTooLarge, max(len(m.View.Leaders), len(m.View.PrevLeaders)))
	case len(m.View.Members) > MaxMembers || len(m.View.PrevMembers) > MaxMembers:
		return fmt.Errorf("%w: view of %d members", ErrTooLarge, max(len(m.View.Members), len(m.View.PrevMembers)))
	case len(m.Lives) > MaxLives:
		return fmt.Errorf("%w: %d lives", ErrTooLarge, len(m.Lives))
	}
	return nil
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

// decoder reads fields in order and remembers the first failure, so the
// readers of fields need not check after every read.
type decoder struct {
	b   []byte
	err error
	// v is the frame's codec: the intent modes are not in codec 3.
	v byte
}

// mode reads a mode byte: one this codec has, or a failure.
func (d *decoder) mode(what string) Mode {
	m := Mode(d.byte(what))
	if d.err == nil && (!m.Valid() || d.v == 3 && m.Intent()) {
		d.fail(what)
	}
	return m
}

func (d *decoder) failWith(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) fail(what string) {
	d.failWith(fmt.Errorf("%w: truncated or bad %s", ErrMalformed, what))
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

func (d *decoder) req(what string) RequestID {
	return RequestID{Node: NodeID(d.uvarint(what)), Seq: d.uvarint(what)}
}

// Decode parses one message of codec MinVersion to Version. It rejects,
// with an error wrapping ErrMalformed, anything over a cap, any unknown
// version or kind, a field it does not know that is marked to be
// understood (ErrMustUnderstand) or, in codec 3, any field it does not
// know; any bad mode, state or code; fields out of tag order or written
// twice; and trailing bytes. A field it does not know and need not
// understand, of a newer writer, is skipped.
func Decode(b []byte) (Message, error) {
	var m Message
	err := DecodeInto(b, &m)
	return m, err
}

// DecodeInto is Decode into *m, which it sets first to the zero Message:
// after an error *m is what Decode would return with it, nothing of an
// earlier frame. A reader that decodes frame after frame into one
// Message of its own spares the heap one message a frame.
func DecodeInto(b []byte, m *Message) error {
	*m = Message{}
	fail := func(err error) error {
		*m = Message{}
		return err
	}
	if len(b) > MaxFrameSize {
		return fmt.Errorf("%w: frame of %d bytes", ErrTooLarge, len(b))
	}
	// Both decoders escape (the fields' getters are func values): made
	// once a frame, not once a field.
	ds := new([2]decoder)
	d, inner := &ds[0], &ds[1]
	d.b = b
	v := d.byte("version")
	d.v = v
	if d.err == nil && v == 0 {
		return fmt.Errorf("%w: codec 0, which no release wrote", ErrMalformed) // garbage, not another release
	}
	if d.err == nil && (v < MinVersion || v > Version) {
		return fmt.Errorf("%w: %d (this build reads %d to %d)", ErrVersion, v, MinVersion, Version)
	}
	m.Kind = Kind(d.byte("kind"))
	if d.err == nil && !m.Kind.Valid() {
		return fmt.Errorf("%w: %d, in a frame of codec %d (this build reads %d to %d)", ErrKind, uint8(m.Kind), v, MinVersion, Version)
	}
	last := uint64(0)
	for d.err == nil && len(d.b) > 0 {
		key := d.uvarint("field key")
		if d.err != nil {
			break
		}
		tag, typ := key, byte(typeVarint)
		if v > 3 {
			tag, typ = key>>keyShift, byte(key&3)
		}
		if tag <= last || (v == 3 && tag > uint64(len(fields))) || typ > typeBytes {
			return fail(fmt.Errorf("%w: field key %d after tag %d", ErrMalformed, key, last))
		}
		last = tag
		if tag > uint64(len(fields)) {
			if key&mustUnderstand != 0 {
				return fail(fmt.Errorf("%w: tag %d, in a frame of codec %d (this build knows %d tags)", ErrMustUnderstand, tag, v, len(fields)))
			}
			d.skip(typ)
			continue
		}
		f := &fields[tag-1]
		switch {
		case v == 3:
			f.get(d, m)
		case typ != f.typ:
			return fail(fmt.Errorf("%w: %s of wire type %d", ErrMalformed, f.name, typ))
		case typ == typeBytes:
			*inner = decoder{b: d.value(f.name), v: v}
			if d.err == nil {
				f.get(inner, m)
				if inner.err == nil && len(inner.b) > 0 {
					inner.fail(f.name)
				}
				d.failWith(inner.err)
			}
		default:
			f.get(d, m)
		}
	}
	if d.err != nil {
		return fail(d.err)
	}
	return nil
}

// value reads a typeBytes field's length and takes that many bytes.
func (d *decoder) value(what string) []byte {
	if d.err != nil {
		return nil
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail(what + " length") // named only here: a frame's every field would pay for the string
		return nil
	}
	d.b = d.b[k:]
	if n > uint64(len(d.b)) {
		d.fail(what)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// skip passes over the value of a field of type typ that this build does
// not know.
func (d *decoder) skip(typ byte) {
	switch typ {
	case typeVarint:
		d.uvarint("unknown field")
	case typeBytes:
		d.value("unknown field")
	}
}

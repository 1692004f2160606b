package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sample() Message {
	return Message{
		Kind: KindReport, From: 3, To: 1, Epoch: 7, Clock: 99, Name: "https://example.com/",
		Req: RequestID{Node: 3, Seq: 5<<32 | 12}, Mode: ModeExclusive, Ticket: 42, Inc: 5,
		Seq: 8, Lifetime: 600, Reject: true, Event: EventGranted, Code: CodeTimedOut,
		Entries: []Entry{{Req: RequestID{Node: 2, Seq: 1}, Ticket: 41, Mode: ModeExclusive, State: StateTicket},
			{Req: RequestID{Node: 3, Seq: 9}, Ticket: 42, Mode: ModeReadWrite, State: StateTicket, Active: true}},
		View: View{Epoch: 4, Leaders: []NodeID{1, 2, 3}, PrevEpoch: 2, PrevLeaders: []NodeID{1, 2, 9},
			Members: []NodeID{1, 2, 3, 4}, PrevMembers: []NodeID{1, 2, 3, 9}},
		Cluster: 0xfeedface, Size: 5, Nonce: 77,
		Lives: []Life{{Incarnation: 4, Nonce: 1 << 63}, {Incarnation: 5, Nonce: 3}},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range []Message{sample(), {Kind: KindEnter}, {Kind: KindLeaseEvent, Name: strings.Repeat("x", MaxNameLen)}} {
		b, err := Encode(nil, &m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("decode %v: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := Encode(nil, ptr(sample()))
	cases := map[string]struct {
		frame []byte
		want  error
	}{
		"empty":            {nil, ErrMalformed},
		"version":          {append([]byte{9}, good[1:]...), ErrVersion},
		"unknown kind":     {append([]byte{Version, 200}, good[2:]...), ErrKind},
		"zero kind":        {append([]byte{Version, 0}, good[2:]...), ErrKind},
		"truncated":        {good[:len(good)-1], ErrMalformed},
		"trailing":         {append(bytes.Clone(good), 0), ErrMalformed},
		"oversized":        {make([]byte, MaxFrameSize+1), ErrTooLarge},
		"long name":        {longName(), ErrTooLarge},
		"entry count":      {hugeCount(), ErrMalformed},
		"bad mode byte":    {withByte(smallReq(), modeOffset, 77), ErrMalformed},
		"no lives":         {append(smallReq(), 0), ErrMalformed},
		"lives count":      {appendUvarint(smallReq(), MaxLives+1), ErrMalformed},
		"life incarnation": {appendUvarint(appendUvarint(appendUvarint(smallReq(), 1), 1<<32), 7), ErrMalformed},
	}
	for name, c := range cases {
		_, err := Decode(c.frame)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
}

func TestEncodeRejectsOverCap(t *testing.T) {
	m := Message{Kind: KindEnter, Name: strings.Repeat("n", MaxNameLen+1)}
	if _, err := Encode(nil, &m); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
	m = Message{Kind: KindReport, Entries: make([]Entry, MaxEntries+1)}
	if _, err := Encode(nil, &m); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
	m = Message{Kind: KindCheckIn, Lives: make([]Life, MaxLives+1)}
	if _, err := Encode(nil, &m); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
	m = Message{Kind: KindCommit, View: View{Leaders: make([]NodeID, MaxLeaders+1)}}
	if _, err := Encode(nil, &m); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
}

func TestCodeStringsAreStable(t *testing.T) {
	want := []string{"", "timedout", "draining", "not_ready", "invalid", "overflow", "lost"}
	for i, s := range want {
		if Code(i).String() != s {
			t.Errorf("code %d = %q, want %q", i, Code(i), s)
		}
		if c, ok := ParseCode(s); !ok || c != Code(i) {
			t.Errorf("ParseCode(%q) = %v %v", s, c, ok)
		}
	}
}

// modeOffset is where the mode byte sits in smallReq's frame: version, kind,
// four one-byte uvarints, the name's length and bytes, then two one-byte ids.
var modeOffset = 2 + 4 + 1 + len("n") + 2

func smallReq() []byte {
	b, _ := Encode(nil, &Message{Kind: KindEnter, From: 1, To: 2, Epoch: 3, Clock: 4, Name: "n", Req: RequestID{Node: 1, Seq: 1}, Mode: ModeExclusive})
	if b[modeOffset] != byte(ModeExclusive) {
		panic("modeOffset is stale")
	}
	return b
}

func ptr[T any](v T) *T { return &v }

func longName() []byte {
	b := []byte{Version, byte(KindEnter), 0, 0, 0, 0}
	return appendUvarint(b, MaxNameLen+1)
}

func hugeCount() []byte {
	m := Message{Kind: KindReport}
	b, _ := Encode(nil, &m)
	b = b[:len(b)-5] // drop the zero entry count and the empty views
	return append(appendUvarint(b, MaxEntries), 0, 0, 0, 0)
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func withByte(b []byte, i int, v byte) []byte {
	c := bytes.Clone(b)
	c[i] = v
	return c
}

func FuzzDecode(f *testing.F) {
	for _, m := range []Message{sample(), {Kind: KindEnter, Name: "a"}, {Kind: KindRestarted, Inc: 3}} {
		b, _ := Encode(nil, &m)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{Version})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode and decode to the same message.
		again, err := Encode(nil, &m)
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		m2, err := Decode(again)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-decode differs: %v\n%+v\n%+v", err, m, m2)
		}
	})
}

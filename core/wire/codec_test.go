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
		Req: RequestID{Node: 3, Seq: 5<<32 | 12}, Mode: ModeExclusive, Ticket: 42, HighWater: 40,
		Incarnation: 5, Lifetime: 600, Reject: true, Held: true, Code: CodeTimedOut,
		Entries: []Entry{{Req: RequestID{Node: 2, Seq: 1}, Ticket: 41, Mode: ModeExclusive, State: StateTicket},
			{Req: RequestID{Node: 3, Seq: 9}, Ticket: 42, Mode: ModeReadWrite, State: StateTicket, Active: true}},
		WatchSeq: 8, ReportSeq: 9, ReadersAgo: 10, Round: 11,
		View: View{Epoch: 4, Leaders: []NodeID{1, 2, 3}, PrevEpoch: 2, PrevLeaders: []NodeID{1, 2, 9},
			Members: []NodeID{1, 2, 3, 4}, PrevMembers: []NodeID{1, 2, 3, 9}},
		ElectionID: "1|2|addr|4|n3", PrepareEpoch: 20, Promised: 12, Cluster: 0xfeedface, ClusterSize: 5, Nonce: 77, StoreAge: 13,
		Lives: []Life{{Incarnation: 4, Nonce: 1 << 63}, {Incarnation: 5, Nonce: 3}}, Unconfirmed: true,
		KnownIncarnation: 1<<32 - 1, KnownStoreAge: 14,
		SnapshotID: 15, SnapshotSince: 16, Answer: 17, AnswerSize: 18, HandoffEpoch: 19, BaseSeq: 20, Try: true, Yield: YieldDrain, Shared: true,
	}
}

// Every field of Message is in the sample, set: a field the codec forgot
// fails the round trip.
func TestSampleSetsEveryField(t *testing.T) {
	v := reflect.ValueOf(sample())
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("sample leaves %s zero", v.Type().Field(i).Name)
		}
	}
	if len(fields) != v.NumField()-1 { // all but Kind have a tag
		t.Errorf("%d fields with a tag, Message has %d besides Kind", len(fields), v.NumField()-1)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range []Message{sample(), {Kind: KindEnter}, {Kind: KindHello, ElectionID: strings.Repeat("x", MaxNameLen)}} {
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

// A frame holds only the fields that are set.
func TestFrameHoldsOnlyWhatIsSet(t *testing.T) {
	b, _ := Encode(nil, &Message{Kind: KindRestarted, From: 1, Incarnation: 2})
	want := []byte{Version, byte(KindRestarted), tagOf("from"), 1, tagOf("incarnation"), 2}
	if !bytes.Equal(b, want) {
		t.Fatalf("frame %v, want %v", b, want)
	}
}

func tagOf(name string) byte {
	for i, f := range fields {
		if f.name == name {
			return byte(i + 1)
		}
	}
	panic("no field " + name)
}

func TestDecodeRejects(t *testing.T) {
	good, _ := Encode(nil, ptr(sample()))
	head := []byte{Version, byte(KindEnter)}
	with := func(parts ...[]byte) []byte { return bytes.Join(append([][]byte{head}, parts...), nil) }
	cases := map[string]struct {
		frame []byte
		want  error
	}{
		"empty":             {nil, ErrMalformed},
		"version":           {append([]byte{9}, good[1:]...), ErrVersion},
		"unknown kind":      {append([]byte{Version, 200}, good[2:]...), ErrKind},
		"zero kind":         {append([]byte{Version, 0}, good[2:]...), ErrKind},
		"truncated":         {good[:len(good)-2], ErrMalformed}, // the last field (a flag: a tag alone) and the value of the one before
		"trailing":          {append(bytes.Clone(good), 0), ErrMalformed},
		"oversized":         {make([]byte, MaxFrameSize+1), ErrTooLarge},
		"long name":         {with([]byte{tagOf("name")}, appendUvarint(nil, MaxNameLen+1)), ErrTooLarge},
		"entry count":       {with([]byte{tagOf("entries")}, appendUvarint(nil, MaxEntries+1), make([]byte, 6*MaxEntries+6)), ErrTooLarge},
		"entry count lie":   {with([]byte{tagOf("entries"), 3}, make([]byte, 12)), ErrMalformed},
		"no entries":        {with([]byte{tagOf("entries"), 0}), ErrMalformed},
		"bad mode byte":     {with([]byte{tagOf("mode"), 77}), ErrMalformed},
		"zero mode":         {with([]byte{tagOf("mode"), 0}), ErrMalformed},
		"bad code":          {with([]byte{tagOf("code"), 200}), ErrMalformed},
		"no lives":          {with([]byte{tagOf("lives"), 0}), ErrMalformed},
		"lives count":       {with([]byte{tagOf("lives")}, appendUvarint(nil, MaxLives+1), make([]byte, 2*MaxLives+2)), ErrMalformed},
		"life incarnation":  {with([]byte{tagOf("lives"), 1}, appendUvarint(nil, 1<<32), []byte{7}), ErrMalformed},
		"incarnation range": {with([]byte{tagOf("incarnation")}, appendUvarint(nil, 1<<32)), ErrMalformed},
		"unknown field":     {with(appendUvarint(nil, uint64(len(fields)+1)), []byte{1}), ErrMalformed},
		"field zero":        {with([]byte{0, 1}), ErrMalformed},
		"fields reordered":  {with([]byte{tagOf("to"), 1, tagOf("from"), 1}), ErrMalformed},
		"field twice":       {with([]byte{tagOf("from"), 1, tagOf("from"), 2}), ErrMalformed},
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

func ptr[T any](v T) *T { return &v }

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func FuzzDecode(f *testing.F) {
	for _, m := range []Message{sample(), {Kind: KindEnter, Name: "a"}, {Kind: KindRestarted, Incarnation: 3}} {
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

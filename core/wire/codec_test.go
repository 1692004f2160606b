package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
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
			Members: []NodeID{1, 2, 3, 4}, PrevMembers: []NodeID{1, 2, 3, 9}, Level: 4},
		ElectionID: "1|2|addr|4|n3", PrepareEpoch: 20, Promised: 12, Cluster: 0xfeedface, ClusterSize: 5, Nonce: 77, StoreAge: 13,
		Lives: []Life{{Incarnation: 4, Nonce: 1 << 63}, {Incarnation: 5, Nonce: 3}}, Unconfirmed: true,
		KnownIncarnation: 1<<32 - 1, KnownStoreAge: 14,
		SnapshotID: 15, SnapshotSince: 16, Answer: 17, AnswerSize: 18, HandoffEpoch: 19, BaseSeq: 20, Try: true, Yield: YieldDrain, Shared: true,
		Codec: 4, Release: "0.9.0",
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
	if len(fields) < lastCodec3Tag || fields[lastCodec3Tag-1].name != "shared" {
		t.Errorf("codec 3's last field is shared, tag %d", lastCodec3Tag)
	}
	view := reflect.ValueOf(sample().View)
	for i := range view.NumField() {
		if view.Field(i).IsZero() {
			t.Errorf("sample leaves View.%s zero", view.Type().Field(i).Name)
		}
	}
	// All but Kind have a tag, and so does the view's level.
	if len(fields) != v.NumField()-1+1 {
		t.Errorf("%d fields with a tag, Message has %d besides Kind, plus the view's level", len(fields), v.NumField()-1)
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

// DecodeInto one Message, frame after frame, gives what Decode gives: a
// field the last frame set and this one does not is zero, and a bad
// frame leaves nothing of the one before.
func TestDecodeIntoReusesOneMessage(t *testing.T) {
	full, _ := Encode(nil, ptr(sample()))
	small, _ := Encode(nil, &Message{Kind: KindEnter, Name: "/a"})
	var m Message
	for i, frame := range [][]byte{full, small, full, {Version, 200}, small} {
		want, wantErr := Decode(frame)
		err := DecodeInto(frame, &m)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("frame %d: %v, Decode says %v", i, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(m, want) {
			t.Fatalf("frame %d:\n got %+v\nwant %+v", i, m, want)
		}
		if err != nil && (m.Name != "" || m.Entries != nil || m.View.Leaders != nil) {
			t.Fatalf("frame %d, bad: the frame before shows through: %+v", i, m)
		}
	}
}

// A frame holds only the fields that are set, in both codecs.
func TestFrameHoldsOnlyWhatIsSet(t *testing.T) {
	m := Message{Kind: KindRestarted, From: 1, Incarnation: 2}
	b, _ := Encode(nil, &m)
	want := bytes.Join([][]byte{{Version, byte(KindRestarted)}, keyOf("from"), {1}, keyOf("incarnation"), {2}}, nil)
	if !bytes.Equal(b, want) {
		t.Fatalf("frame %v, want %v", b, want)
	}
	b, _ = EncodeVersion(nil, &m, 3)
	want = []byte{3, byte(KindRestarted), tagOf("from"), 1, tagOf("incarnation"), 2}
	if !bytes.Equal(b, want) {
		t.Fatalf("codec 3 frame %v, want %v", b, want)
	}
}

// tagOf is a field's tag, its codec 3 key.
func tagOf(name string) byte {
	for i, f := range fields {
		if f.name == name {
			return byte(i + 1)
		}
	}
	panic("no field " + name)
}

// keyOf is a field's codec 4 key, as written.
func keyOf(name string) []byte {
	i := int(tagOf(name)) - 1
	return appendUvarint(nil, fields[i].key(i+1))
}

func TestDecodeRejects(t *testing.T) {
	good, _ := Encode(nil, ptr(sample()))
	good3, _ := EncodeVersion(nil, ptr(sample()), 3)
	head := []byte{Version, byte(KindEnter)}
	with := func(parts ...[]byte) []byte { return bytes.Join(append([][]byte{head}, parts...), nil) }
	head3 := []byte{3, byte(KindEnter)}
	with3 := func(parts ...[]byte) []byte { return bytes.Join(append([][]byte{head3}, parts...), nil) }
	// value is a typeBytes field's length and payload.
	value := func(payload ...[]byte) []byte {
		p := bytes.Join(payload, nil)
		return append(appendUvarint(nil, uint64(len(p))), p...)
	}
	unknownTag := uint64(len(fields) + 1)
	cases := map[string]struct {
		frame []byte
		want  error
	}{
		"empty":               {nil, ErrMalformed},
		"version":             {append([]byte{9}, good[1:]...), ErrVersion},
		"version 2":           {append([]byte{2}, good3[1:]...), ErrVersion},
		"version 0":           {append([]byte{0}, good[1:]...), ErrMalformed},
		"unknown kind":        {append([]byte{Version, 200}, good[2:]...), ErrKind},
		"zero kind":           {append([]byte{Version, 0}, good[2:]...), ErrKind},
		"truncated":           {good[:len(good)-3], ErrMalformed}, // into the yield field's key
		"truncated value":     {with(keyOf("name"), appendUvarint(nil, 5), []byte("abc")), ErrMalformed},
		"trailing":            {append(bytes.Clone(good), 0), ErrMalformed},
		"oversized":           {make([]byte, MaxFrameSize+1), ErrTooLarge},
		"long name":           {with(keyOf("name"), value(appendUvarint(nil, MaxNameLen+1), make([]byte, MaxNameLen+1))), ErrTooLarge},
		"entry count":         {with(keyOf("entries"), value(appendUvarint(nil, MaxEntries+1), make([]byte, 6*MaxEntries+6))), ErrTooLarge},
		"entry count lie":     {with(keyOf("entries"), value([]byte{3}, make([]byte, 12))), ErrMalformed},
		"no entries":          {with(keyOf("entries"), value([]byte{0})), ErrMalformed},
		"bad mode byte":       {with(keyOf("mode"), value([]byte{77})), ErrMalformed},
		"zero mode":           {with(keyOf("mode"), value([]byte{0})), ErrMalformed},
		"mode with more":      {with(keyOf("mode"), value([]byte{1, 1})), ErrMalformed},
		"bad code":            {with(keyOf("code"), value([]byte{200})), ErrMalformed},
		"no lives":            {with(keyOf("lives"), value([]byte{0})), ErrMalformed},
		"life incarnation":    {with(keyOf("lives"), value([]byte{1}, appendUvarint(nil, 1<<32), []byte{7})), ErrMalformed},
		"incarnation range":   {with(keyOf("incarnation"), appendUvarint(nil, 1<<32)), ErrMalformed},
		"wrong wire type":     {with([]byte{keyOf("from")[0] | typeBytes}, value([]byte{1})), ErrMalformed},
		"unknown wire type":   {with([]byte{keyOf("from")[0] | 3, 1}), ErrMalformed},
		"must understand":     {with(appendUvarint(nil, unknownTag<<keyShift|mustUnderstand|typeVarint), []byte{1}), ErrMustUnderstand},
		"field zero":          {with([]byte{0, 1}), ErrMalformed},
		"fields reordered":    {with(keyOf("to"), []byte{1}, keyOf("from"), []byte{1}), ErrMalformed},
		"field twice":         {with(keyOf("from"), []byte{1}, keyOf("from"), []byte{2}), ErrMalformed},
		"unknown after known": {with(appendUvarint(nil, unknownTag<<keyShift|typeVarint), []byte{1}, keyOf("from"), []byte{1}), ErrMalformed},
		"codec 3 unknown":     {with3(appendUvarint(nil, unknownTag), []byte{1}), ErrMalformed},
		"codec 3 truncated":   {good3[:len(good3)-2], ErrMalformed}, // the last field (a flag: a tag alone) and the value of the one before
		"codec 3 reordered":   {with3([]byte{tagOf("to"), 1, tagOf("from"), 1}), ErrMalformed},
		"codec 3 bad mode":    {with3([]byte{tagOf("mode"), 77}), ErrMalformed},
	}
	for name, c := range cases {
		_, err := Decode(c.frame)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
	// Codec 0 is garbage, not another release's frame: the mesh resets
	// the stream it came on rather than read on.
	if _, err := Decode(append([]byte{0}, good[1:]...)); errors.Is(err, ErrVersion) {
		t.Errorf("codec 0 is taken for another release's: %v", err)
	}
}

// TestSkipsWhatItNeedNotUnderstand: a newer writer's fields this build
// does not know, of every wire type and not marked to be understood, are
// skipped, and the known part of the frame is read as it was written.
func TestSkipsWhatItNeedNotUnderstand(t *testing.T) {
	m := Message{Kind: KindEnter, From: 3, Name: "/site", Ticket: 9, Shared: true}
	b, _ := Encode(nil, &m)
	tag := uint64(len(fields) + 1)
	for _, extra := range [][]byte{
		appendUvarint(appendUvarint(nil, tag<<keyShift|typeVarint), 1<<40),
		appendUvarint(nil, (tag+1)<<keyShift|typeFlag),
		append(appendUvarint(appendUvarint(nil, (tag+2)<<keyShift|typeBytes), 300), make([]byte, 300)...),
	} {
		got, err := Decode(append(bytes.Clone(b), extra...))
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("a frame with an unknown field %x: %+v, %v", extra[:2], got, err)
		}
	}
}

// TestCodec3Frames: frames as the previous release writes them decode to
// the messages it meant, and this build writes codec 3 byte for byte as
// it did, for peers that read nothing newer.
func TestCodec3Frames(t *testing.T) {
	data, err := os.ReadFile("testdata/codec3.txt")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	kinds := map[Kind]bool{}
	for i := 0; i+1 < len(lines); i += 2 {
		var want Message
		if err := json.Unmarshal([]byte(lines[i]), &want); err != nil {
			t.Fatal(err)
		}
		frame, err := hex.DecodeString(lines[i+1])
		if err != nil {
			t.Fatal(err)
		}
		kinds[want.Kind] = true
		got, err := Decode(frame)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("codec 3 frame of %v:\n got %+v, %v\nwant %+v", want.Kind, got, err, want)
		}
		if again, _ := EncodeVersion(nil, &want, 3); !bytes.Equal(again, frame) {
			t.Errorf("codec 3 of %v is written\n%x, the previous release wrote\n%x", want.Kind, again, frame)
		}
	}
	for k := KindEnter; k.Valid(); k++ {
		if !kinds[k] && k <= lastCodec3Kind {
			t.Errorf("no codec 3 frame of kind %v", k)
		}
	}
}

// TestIntentModesInCodec3: codec 3 has no intent modes. A request in one
// is never written in it; a table that lists such tickets is shown to a
// codec 3 reader in the nearest modes it has, as a lossy frame; and a
// codec 3 frame that claims one is malformed.
func TestIntentModesInCodec3(t *testing.T) {
	enter := Message{Kind: KindEnter, Name: "/site", Req: RequestID{Node: 1, Seq: 1}, Mode: ModeIntentShared}
	if _, err := EncodeVersion(nil, &enter, 3); !errors.Is(err, ErrVersion) {
		t.Fatalf("an intent mode in codec 3: %v, want ErrVersion", err)
	}
	report := Message{Kind: KindReport, Name: "/site", Entries: []Entry{
		{Req: RequestID{Node: 1, Seq: 1}, Ticket: 4, Mode: ModeIntentShared, State: StateTicket},
		{Req: RequestID{Node: 2, Seq: 1}, Ticket: 5, Mode: ModeIntentExclusive, State: StateTicket},
		{Req: RequestID{Node: 3, Seq: 1}, Ticket: 6, Mode: ModeReadWrite, State: StateTicket}}}
	if !Lossy(&report, 3) || Lossy(&report, 4) {
		t.Error("a report with intent tickets is lossy in codec 3 only")
	}
	b, err := EncodeVersion(nil, &report, 3)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var modes []Mode
	for _, e := range got.Entries {
		modes = append(modes, e.Mode)
	}
	if want := []Mode{ModeReadOnly, ModeReadWritePriority, ModeReadWrite}; !reflect.DeepEqual(modes, want) {
		t.Errorf("codec 3 shows the modes %v, want %v", modes, want)
	}
	if report.Entries[0].Mode != ModeIntentShared {
		t.Error("encoding changed the caller's entries")
	}
	// The same frame with the mode byte of the first entry set back to
	// intent-shared: a codec 3 writer never wrote it.
	enter.Mode = ModeReadOnly
	b, _ = EncodeVersion(nil, &enter, 3)
	i := bytes.LastIndexByte(b, byte(ModeReadOnly))
	b[i] = byte(ModeIntentShared)
	if _, err := Decode(b); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "mode") {
		t.Errorf("a codec 3 frame with an intent mode: %v, want ErrMalformed about the mode", err)
	}
	enter.Mode = ModeIntentExclusive
	if b, err = Encode(nil, &enter); err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(b); err != nil || got.Mode != ModeIntentExclusive {
		t.Errorf("codec 4 carries intent modes: %v %v", got.Mode, err)
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

// codec3Part is m without the fields codec 3 does not have.
func codec3Part(m Message) Message {
	m.View.Level, m.Codec, m.Release = 0, 0, ""
	m.Entries, _ = codec3Entries(m.Entries) // intent modes as their nearest codec 3 modes
	return m
}

func FuzzDecode(f *testing.F) {
	for _, m := range []Message{sample(), {Kind: KindEnter, Name: "a"}, {Kind: KindRestarted, Incarnation: 3}} {
		for v := MinVersion; v <= Version; v++ {
			b, _ := EncodeVersion(nil, &m, v)
			f.Add(b)
		}
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
		// Whatever decodes must re-encode, in every codec, and decode to
		// the same message.
		for v := MinVersion; v <= Version; v++ {
			again, err := EncodeVersion(nil, &m, v)
			if v == 3 && m.Mode.Intent() {
				if !errors.Is(err, ErrVersion) {
					t.Fatalf("a request in an intent mode in codec 3: %v, want ErrVersion", err)
				}
				continue // never written in codec 3
			}
			if err != nil {
				t.Fatalf("decoded message does not encode in codec %d: %v", v, err)
			}
			m2, err := Decode(again)
			want := m
			if v == 3 {
				want = codec3Part(m)
			}
			if err != nil || !reflect.DeepEqual(want, m2) {
				t.Fatalf("codec %d re-decode differs: %v\n%+v\n%+v", v, err, m, m2)
			}
		}
	})
}

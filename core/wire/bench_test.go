package wire_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/core/wire"
)

// benchMessages are typical frames of the lock core, shaped as the core
// sends them: an ENTER and an ADD_TICKET of one request, and reports of a
// name with 1, 64 and 1024 requests in its table.
func benchMessages() []struct {
	name string
	m    wire.Message
} {
	const name = "https://example.com/checkout"
	req := wire.RequestID{Node: 3856853052955777315, Seq: 5<<32 | 77}
	enter := wire.Message{Kind: wire.KindEnter, From: 3856853052955777315, To: 1193046, Epoch: 12, Clock: 48213,
		Name: name, Req: req, Mode: wire.ModeReadOnly, Lifetime: 6600}
	add := enter
	add.Kind, add.Clock, add.Ticket, add.Incarnation = wire.KindAddTicket, 48219, 90412, 7
	out := []struct {
		name string
		m    wire.Message
	}{{"enter", enter}, {"add-ticket", add}}
	for _, n := range []int{1, 64, 1024} {
		entries := make([]wire.Entry, n)
		for i := range entries {
			entries[i] = wire.Entry{Req: wire.RequestID{Node: wire.NodeID(1000003 * (i%7 + 1)), Seq: 5<<32 | uint64(i+1)},
				Ticket: uint64(90000 + i), Mode: wire.ModeReadOnly, State: wire.StateTicket}
			if i%16 == 0 {
				entries[i].Mode, entries[i].Active = wire.ModeReadWrite, true
			}
		}
		out = append(out, struct {
			name string
			m    wire.Message
		}{fmt.Sprintf("report-%d", n), wire.Message{Kind: wire.KindReport, From: 1193046, To: 3856853052955777315,
			Epoch: 12, Clock: 48230, Name: name, Incarnation: 4, ReportSeq: 2211, WatchSeq: 301, ReadersAgo: 0,
			Entries: entries}})
	}
	return out
}

// codecs are the codecs a sender writes, the benchmarks' first level.
var codecs = []byte{wire.MinVersion, wire.Version}

// BenchmarkEncode encodes into a reused buffer, as a sender does, in each
// codec.
func BenchmarkEncode(b *testing.B) {
	for _, v := range codecs {
		for _, c := range benchMessages() {
			b.Run(fmt.Sprintf("codec%d/%s", v, c.name), func(b *testing.B) { benchEncode(b, c.m, v) })
		}
	}
}

func benchEncode(b *testing.B, m wire.Message, v byte) {
	frame, err := wire.EncodeVersion(nil, &m, v)
	if err != nil {
		b.Fatal(err)
	}
	want := len(frame)
	b.SetBytes(int64(want))
	b.ReportAllocs()
	// The first encode's buffer: room for what Encode appends and takes
	// back (the key of a field that is not set).
	buf := frame
	for b.Loop() {
		if buf, err = wire.EncodeVersion(buf[:0], &m, v); err != nil || len(buf) != want {
			b.Fatalf("encoded %d bytes, want %d: %v", len(buf), want, err)
		}
	}
}

// BenchmarkDecode decodes one frame per iteration, as a receiver does, of
// each codec.
func BenchmarkDecode(b *testing.B) {
	for _, v := range codecs {
		for _, c := range benchMessages() {
			b.Run(fmt.Sprintf("codec%d/%s", v, c.name), func(b *testing.B) { benchDecode(b, c.m, v) })
		}
	}
}

func benchDecode(b *testing.B, want wire.Message, v byte) {
	frame, err := wire.EncodeVersion(nil, &want, v)
	if err != nil {
		b.Fatal(err)
	}
	if got, err := wire.Decode(frame); err != nil || !reflect.DeepEqual(got, want) {
		b.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, want)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	// As a stream's reader decodes: into one Message of its own.
	m := new(wire.Message)
	for b.Loop() {
		err := wire.DecodeInto(frame, m)
		if err != nil || m.Kind != want.Kind || len(m.Entries) != len(want.Entries) {
			b.Fatalf("decoded %v: %v", m, err)
		}
	}
}

package p2p

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/wire"
)

// A host of the previous release (codec 3 only) and a current one talk:
// each writes to the other in the newest codec both read, found when the
// lock stream opens; nothing is refused or reset. Two current hosts speak
// codec 4.
func TestMixedCodecs(t *testing.T) {
	t.Parallel()
	a := start(t, Config{Version: "0.9.0"})
	old := start(t, Config{maxCodec: wire.MinVersion, Peers: a.Addrs()})
	b := start(t, Config{Version: "0.9.0", Peers: a.Addrs()})
	eventually(t, "a to know the old host and b", func() bool {
		_, o := memberOf(a, old.Self())
		_, n := memberOf(a, b.Self())
		return o && n
	})
	for i := range uint64(3) {
		send(t, a, msg(old.Self(), i))
		if m := recv(t, old); m.StoreAge != i || m.From != a.Self() {
			t.Fatalf("the old host got %v", m)
		}
		send(t, old, msg(a.Self(), 10+i))
		if m := recv(t, a); m.StoreAge != 10+i || m.From != old.Self() {
			t.Fatalf("the current host got %v from the old one", m)
		}
		send(t, a, msg(b.Self(), 20+i))
		if m := recv(t, b); m.StoreAge != 20+i {
			t.Fatalf("b got %v", m)
		}
	}
	if m, _ := memberOf(a, old.Self()); m.Codec != wire.MinVersion {
		t.Errorf("a writes to the old host in codec %d, want %d", m.Codec, wire.MinVersion)
	}
	eventually(t, "a to know b reads codec 4 and runs 0.9.0", func() bool {
		m, _ := memberOf(a, b.Self())
		return m.Codec == wire.Version && m.Version == "0.9.0"
	})
	for _, h := range []*Host{a, old, b} {
		if st := h.Stats(); st.Refused+st.Malformed+st.Resets != 0 {
			t.Errorf("stats of %d: %+v", h.Self(), st)
		}
	}
}

// A frame written in codec 3 that left out a field codec 3 lacks (a
// view's level) never goes on a stream of codec 4, whose reader would take
// the view for one without a level: queued before the stream to a peer
// that was upgraded opened, it is dropped there. Frames that lost nothing
// go on. Before any stream, frames are written in the codec the peerstore
// says the stream will open in.
func TestNoLossyFrameOnNewerStream(t *testing.T) {
	t.Parallel()
	a := start(t, Config{})
	b := start(t, Config{Peers: a.Addrs()})
	eventually(t, "a to know b", func() bool { _, ok := memberOf(a, b.Self()); return ok })
	p := a.openPeer(b.Self())
	if c := a.sendCodec(p); c != wire.Version {
		t.Fatalf("before any stream, frames to b are written in codec %d; identify said it reads %d", c, wire.Version)
	}
	send(t, a, msg(b.Self(), 1)) // opens the stream, codec 4
	if m := recv(t, b); m.StoreAge != 1 {
		t.Fatalf("b got %v", m)
	}
	hello := msg(b.Self(), 2)
	hello.View = wire.View{Epoch: 2, Leaders: []wire.NodeID{1}, Members: []wire.NodeID{1}, PrevMembers: []wire.NodeID{1}, Level: 4}
	hello.Codec, hello.Release = 4, "0.9.0"
	queue := func(m wire.Message, codec byte) {
		f, err := encodeFrame(&m, codec)
		if err != nil {
			t.Fatal(err)
		}
		p.queue <- frames{b: f, n: 1, codec: codec, lossy: wire.Lossy(&m, codec)}
	}
	queue(hello, 3)            // lost its level: dropped
	queue(msg(b.Self(), 3), 3) // lost nothing: goes
	send(t, a, hello)          // in the stream's codec: goes whole
	if m := recv(t, b); m.StoreAge != 3 {
		t.Fatalf("b got %v first, want the codec 3 frame that lost nothing", m)
	}
	if m := recv(t, b); m.StoreAge != 2 || m.View.Level != 4 || m.Codec != 4 || m.Release != "0.9.0" {
		t.Fatalf("b got %v, want the hello whole", m)
	}
	if st := a.Stats(); st.Dropped != 1 {
		t.Errorf("a dropped %d frames, want the lossy one: %+v", st.Dropped, st)
	}
}

// A frame of another release that this build does not understand (a
// newer codec, kind or field marked to be understood, or the codec of a
// release two back) is refused alone and counted; the stream goes on, and
// a field it need not understand is skipped.
func TestRefusesWhatItDoesNotKnow(t *testing.T) {
	t.Parallel()
	a := start(t, Config{})
	b := start(t, Config{Peers: a.Addrs()})
	good := func(age uint64) []byte {
		f, err := wire.Encode(nil, &wire.Message{Kind: wire.KindRestarted, StoreAge: age})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	unknownTag := uint64(1 << 10) // far past the fields of this build
	withField := func(key uint64) []byte {
		return binary.AppendUvarint(binary.AppendUvarint(good(1), key), 5)
	}
	newKind := append([]byte{wire.Version, 200}, good(1)[2:]...)
	newCodec := append([]byte{wire.Version + 1}, good(1)[1:]...)
	oldCodec := append([]byte{wire.MinVersion - 1}, good(1)[1:]...) // two releases back
	mustUnderstand := withField(unknownTag<<3 | 1<<2)
	optional := withField(unknownTag << 3)
	var frames []byte
	for _, f := range [][]byte{newKind, newCodec, oldCodec, mustUnderstand, optional, good(2)} {
		frames = binary.AppendUvarint(frames, uint64(len(f)))
		frames = append(frames, f...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	s, err := b.host.NewStream(ctx, a.PeerID(), LockProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.SetWriteDeadline(time.Now().Add(waitLimit))
	if _, err := s.Write(frames); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, a); m.StoreAge != 1 || m.Kind != wire.KindRestarted {
		t.Fatalf("the frame with an optional unknown field: %v", m)
	}
	if m := recv(t, a); m.StoreAge != 2 {
		t.Fatalf("the frame after the refused ones: %v", m)
	}
	if st := a.Stats(); st.Refused != 4 || st.Resets != 0 || st.Malformed != 0 {
		t.Fatalf("stats: %+v, want 4 refused and no reset", st)
	}
}

// A peer that claims a codec it does not speak (its announcement says 9)
// is still written to in the codec its lock stream was opened in, and
// listed with that one.
func TestClaimedCodecIsNotTrusted(t *testing.T) {
	t.Parallel()
	a := start(t, Config{})
	b := start(t, Config{Peers: a.Addrs()})
	eventually(t, "a to know b", func() bool { _, ok := memberOf(a, b.Self()); return ok })
	send(t, a, msg(b.Self(), 1))
	recv(t, b)
	a.setVersion(b.Self(), "9.9.9", 9)
	if m, _ := memberOf(a, b.Self()); m.Codec != wire.Version || m.Version != "9.9.9" {
		t.Fatalf("b claims codec 9: listed as %+v, want codec %d", m, wire.Version)
	}
	send(t, a, msg(b.Self(), 2))
	if m := recv(t, b); m.StoreAge != 2 {
		t.Fatalf("b got %v", m)
	}
	if st := b.Stats(); st.Refused+st.Malformed != 0 {
		t.Fatalf("b refused frames: %+v", st)
	}
}

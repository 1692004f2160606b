package p2p

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/sluicehq/sluice/core/wire"
)

// Three hosts wired by Config.Peers exchange messages every way; From is the
// true sender even when the frame lies; one peer's frames keep their order.
func TestThreeHosts(t *testing.T) {
	t.Parallel()
	a := start(t, Config{Name: "a"})
	b := start(t, Config{Name: "b", Peers: a.Addrs()})
	c := start(t, Config{Name: "c", Peers: append(a.Addrs(), b.Addrs()...)})
	hosts := []*Host{a, b, c}

	// b and c know a (config), c knows b; their first frames teach the
	// receivers about them.
	send(t, b, msg(a.Self(), 1))
	send(t, c, msg(a.Self(), 2))
	send(t, c, msg(b.Self(), 3))
	got := map[uint64]wire.NodeID{}
	for range 2 {
		m := recv(t, a)
		got[m.StoreAge] = m.From
	}
	m := recv(t, b)
	got[m.StoreAge] = m.From
	if got[1] != b.Self() || got[2] != c.Self() || got[3] != c.Self() {
		t.Fatalf("senders %v", got)
	}

	// Now every pair can talk both ways.
	for i, from := range hosts {
		for j, to := range hosts {
			if i != j {
				send(t, from, msg(to.Self(), uint64(10*i+j)))
			}
		}
	}
	for _, h := range hosts {
		for range 2 {
			m := recv(t, h)
			i, j := int(m.StoreAge/10), int(m.StoreAge%10)
			if hosts[j] != h || hosts[i].Self() != m.From {
				t.Fatalf("node %d got seq %d from %d", h.Self(), m.StoreAge, m.From)
			}
		}
	}

	// A spoofed From is overwritten with the authenticated sender.
	spoof := msg(a.Self(), 99)
	spoof.From = b.Self()
	send(t, c, spoof)
	if m := recv(t, a); m.StoreAge != 99 || m.From != c.Self() {
		t.Fatalf("spoofed message arrived as %v", m)
	}

	// Order per peer, with batching under load.
	const n = 500
	for i := range uint64(n) {
		send(t, b, msg(a.Self(), 1000+i))
	}
	for i := range uint64(n) {
		if m := recv(t, a); m.StoreAge != 1000+i || m.From != b.Self() {
			t.Fatalf("frame %d: got seq %d from %d", i, m.StoreAge, m.From)
		}
	}

	for _, h := range hosts {
		ms := h.Members()
		if len(ms) != 2 || !slices.IsSortedFunc(ms, func(x, y Member) int { return cmp.Compare(x.Node, y.Node) }) {
			t.Fatalf("node %d members %+v", h.Self(), ms)
		}
		if s := h.Stats(); s.Malformed != 0 || s.Oversized != 0 {
			t.Fatalf("node %d stats %+v", h.Self(), s)
		}
	}
	if s := a.Stats(); s.FramesIn < n+4 {
		t.Fatalf("a stats %+v", s)
	}
}

// A host that knows one peer learns a third one from its announcement,
// relayed by gossip, and can send to it.
func TestGossipLearnsThird(t *testing.T) {
	t.Parallel()
	b := start(t, Config{Name: "b"})
	a := start(t, Config{Name: "a", Peers: b.Addrs()})
	c := start(t, Config{Name: "c", Peers: b.Addrs()})

	waitJoined(t, a, c.Self())
	mc, ok := memberOf(a, c.Self())
	if !ok || mc.Name != "c" || mc.Peer != c.PeerID() || len(mc.Addrs) == 0 {
		t.Fatalf("a's view of c: %+v", mc)
	}
	// The transport may lose a frame while the first dial to a peer
	// learned by gossip is under way (the protocols above retransmit):
	// send again until one arrives.
	deadline := time.Now().Add(waitLimit)
	for got := false; !got; {
		send(t, a, msg(c.Self(), 7))
		select {
		case m := <-c.Inbox():
			if m.From != a.Self() || m.StoreAge != 7 {
				t.Fatalf("c got %v", m)
			}
			got = true
		case <-time.After(500 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("c got nothing from a within %v (stats %+v)", waitLimit, a.Stats())
			}
		}
	}
	eventually(t, "a connected to c", func() bool {
		m, _ := memberOf(a, c.Self())
		return m.Connected
	})
	if a.Stats().Announcements == 0 {
		t.Fatalf("a stats %+v", a.Stats())
	}
}

func testPSK(b byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = b + byte(i)
	}
	return k
}

func addrInfo(t *testing.T, h *Host) peer.AddrInfo {
	t.Helper()
	ai, err := peer.AddrInfoFromString(h.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	return *ai
}

// A host with another PSK can neither connect nor deliver; one with the
// right PSK can.
func TestWrongPSK(t *testing.T) {
	t.Parallel()
	a := start(t, Config{PSK: testPSK(1)})
	bad := start(t, Config{PSK: testPSK(2), Peers: a.Addrs()})

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	err := bad.host.Connect(ctx, addrInfo(t, a))
	if err == nil {
		t.Fatal("a host with the wrong PSK connected")
	}
	t.Logf("wrong PSK dial: %v", err)
	send(t, bad, msg(a.Self(), 1))
	eventually(t, "the wrong-PSK host to fail opening its stream", func() bool {
		s := bad.Stats()
		return s.DialFailures > 0 && s.Dropped > 0
	})

	good := start(t, Config{PSK: testPSK(1), Peers: a.Addrs()})
	send(t, good, msg(a.Self(), 2))
	if m := recv(t, a); m.StoreAge != 2 || m.From != good.Self() {
		t.Fatalf("a got %v", m)
	}
	if _, ok := memberOf(a, bad.Self()); ok || a.Stats().FramesIn != 1 {
		t.Fatalf("the wrong-PSK host got through: members %+v stats %+v", a.Members(), a.Stats())
	}
}

// With an allow-list, only listed peers connect, in either direction.
func TestAllowList(t *testing.T) {
	t.Parallel()
	kb := newKey(t)
	a := start(t, Config{AllowList: []peer.ID{idOf(t, kb)}})
	b := start(t, Config{Key: kb, Peers: a.Addrs()})
	c := start(t, Config{Peers: a.Addrs()})

	send(t, b, msg(a.Self(), 1))
	if m := recv(t, a); m.From != b.Self() {
		t.Fatalf("a got %v", m)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	s, err := c.host.NewStream(ctx, a.PeerID(), LockProtocol)
	t.Logf("stream from a peer off the allow-list: %v", err)
	if err == nil {
		// The dialer may finish its handshake before a refuses; the stream must still die.
		_ = s.SetReadDeadline(time.Now().Add(waitLimit))
		_, err := s.Read(make([]byte, 1))
		if err == nil {
			t.Fatal("a peer off the allow-list opened a working stream")
		}
		t.Logf("read on it: %v", err)
		_ = s.Reset()
	}
	if err := a.host.Connect(ctx, addrInfo(t, c)); err == nil {
		t.Fatal("a dialed a peer off its allow-list")
	} else {
		t.Logf("dial to a peer off the allow-list: %v", err)
	}
	if _, ok := memberOf(a, c.Self()); ok {
		t.Fatalf("a lists c: %+v", a.Members())
	}
	eventually(t, "c's connection to a to be gone", func() bool {
		return c.host.Network().Connectedness(a.PeerID()) != network.Connected
	})
	send(t, b, msg(a.Self(), 2))
	if m := recv(t, a); m.StoreAge != 2 || m.From != b.Self() {
		t.Fatalf("a got %v", m)
	}
}

// Junk on a raw lock stream resets that stream and is counted; the host
// keeps serving.
func TestBadFrames(t *testing.T) {
	t.Parallel()
	a := start(t, Config{})
	b := start(t, Config{Peers: a.Addrs()})
	over := uint64(a.maxFrame + 1)
	cases := []struct {
		name      string
		junk      []byte
		oversized bool
	}{
		{"length over cap", appendUvarint(nil, over), true},
		{"huge varint", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, true},
		{"padded varint", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, false},
		{"garbage body", append(appendUvarint(nil, 5), wire.Version, byte(wire.KindEnter), 0xff, 0xff, 0xff), false},
		{"empty body", appendUvarint(nil, 0), false},
	}
	for i, tc := range cases {
		before := a.Stats()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		s, err := b.host.NewStream(ctx, a.PeerID(), LockProtocol)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(tc.junk); err != nil {
			t.Fatalf("%s: write: %v", tc.name, err)
		}
		_ = s.SetReadDeadline(time.Now().Add(waitLimit))
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, network.ErrReset) {
			t.Fatalf("%s: the stream was not reset: %v", tc.name, err)
		}
		after := a.Stats()
		if tc.oversized && after.Oversized != before.Oversized+1 ||
			!tc.oversized && after.Malformed != before.Malformed+1 ||
			after.Resets != before.Resets+1 {
			t.Fatalf("%s: stats before %+v after %+v", tc.name, before, after)
		}
		send(t, b, msg(a.Self(), uint64(i)))
		if m := recv(t, a); m.StoreAge != uint64(i) || m.From != b.Self() {
			t.Fatalf("%s: a got %v", tc.name, m)
		}
	}
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// Raw bytes on the TCP port fail libp2p's handshake; the host keeps serving.
func TestGarbageTCP(t *testing.T) {
	t.Parallel()
	for _, psk := range [][]byte{nil, testPSK(3)} {
		a := start(t, Config{PSK: psk})
		b := start(t, Config{PSK: psk, Peers: a.Addrs()})
		tcpAddr, _ := peer.SplitAddr(ma.StringCast(a.Addrs()[0]))
		na, err := manet.ToNetAddr(tcpAddr)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.DialTimeout("tcp", na.String(), waitLimit)
		if err != nil {
			t.Fatal(err)
		}
		junk := make([]byte, 4096)
		for i := range junk {
			junk[i] = byte(i*7 + 3)
		}
		_, _ = conn.Write(junk)
		_ = conn.SetReadDeadline(time.Now().Add(waitLimit))
		// Drain until a drops us: the handshake failed and a closed the connection.
		buf := make([]byte, 1024)
		for {
			if _, err := conn.Read(buf); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("psk=%v: a kept the garbage connection open", psk != nil)
				}
				break
			}
		}
		_ = conn.Close()
		send(t, b, msg(a.Self(), 5))
		if m := recv(t, a); m.StoreAge != 5 || m.From != b.Self() {
			t.Fatalf("a got %v", m)
		}
	}
}

// A peer that restarts with its key on a new port is reached again: its
// writer's broken stream is replaced and messages flow both ways.
func TestReconnect(t *testing.T) {
	t.Parallel()
	a := start(t, Config{Name: "a"})
	kb := newKey(t)
	b := start(t, Config{Key: kb, Name: "b", Peers: a.Addrs()})
	send(t, b, msg(a.Self(), 1))
	recv(t, a)
	send(t, a, msg(b.Self(), 2))
	recv(t, b)

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b.Send(msg(a.Self(), 3)) {
		t.Fatal("Send after Close was accepted")
	}
	b2 := start(t, Config{Key: kb, Name: "b2", Peers: a.Addrs()})
	if b2.Self() != b.Self() {
		t.Fatal("same key, different node id")
	}

	// a's old stream to b is dead; a resends, as the core does, until one
	// frame gets through on the new stream.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(waitLimit)
	for got := false; !got; {
		a.Send(msg(b2.Self(), 4))
		select {
		case m := <-b2.Inbox():
			got = m.StoreAge == 4 && m.From == a.Self()
		case <-tick.C:
		case <-timeout:
			t.Fatalf("no message reached the restarted peer; a stats %+v", a.Stats())
		}
	}
	send(t, b2, msg(a.Self(), 5))
	if m := recv(t, a); m.StoreAge != 5 || m.From != b2.Self() {
		t.Fatalf("a got %v", m)
	}
	eventually(t, "a to see b2 connected under its new name", func() bool {
		m, ok := memberOf(a, b2.Self())
		return ok && m.Connected && m.Name == "b2"
	})
}

// Send refuses, and counts, what it cannot deliver.
func TestSendRefuses(t *testing.T) {
	t.Parallel()
	a := start(t, Config{QueueLen: 1})
	if a.Send(msg(a.Self(), 1)) || a.Send(msg(12345, 1)) {
		t.Fatal("Send to self or to an unknown node was accepted")
	}
	if d := a.Stats().Dropped; d != 2 {
		t.Fatalf("dropped %d, want 2", d)
	}
	b := start(t, Config{})
	c := start(t, Config{Peers: b.Addrs()})
	big := msg(b.Self(), 1)
	big.Name = string(make([]byte, wire.MaxNameLen+1))
	if c.Send(big) {
		t.Fatal("an unencodable message was accepted")
	}
	// Config errors.
	ctx := context.Background()
	for _, cfg := range []Config{
		{},
		{Key: newKey(t), PSK: []byte{1, 2, 3}},
		{Key: newKey(t), Peers: []string{"/ip4/127.0.0.1/tcp/1"}},
		{Key: newKey(t), Peers: []string{"not an address"}},
	} {
		if h, err := New(ctx, cfg); !errors.Is(err, ErrConfig) {
			if h != nil {
				_ = h.Close()
			}
			t.Fatalf("config %+v: err %v", cfg, err)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if h, err := New(canceled, Config{Key: newKey(t)}); err == nil {
		_ = h.Close()
		t.Fatal("New with a canceled context succeeded")
	}
}

// A configured peer that restarts on its old port, knowing nobody, is
// redialed by the maintenance loop and served again.
func TestRedialConfigured(t *testing.T) {
	t.Parallel()
	kb := newKey(t)
	b := start(t, Config{Key: kb})
	a := start(t, Config{Peers: b.Addrs()})
	send(t, a, msg(b.Self(), 1))
	recv(t, b)

	listen, _ := peer.SplitAddr(ma.StringCast(b.Addrs()[0]))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a to notice b is gone", func() bool {
		m, _ := memberOf(a, b.Self())
		return !m.Connected
	})
	b2 := restartOn(t, kb, listen)
	eventually(t, "a to redial b", func() bool {
		m, _ := memberOf(a, b.Self())
		return m.Connected
	})
	// b2 knows nobody and dials no one, so the connection is a's. Which of
	// a's dials made it is not asked: a dial a's maintenance started before
	// b went may reach b2 (it is counted when it starts, and a loaded
	// machine may run its connect late).
	for _, c := range b2.host.Network().ConnsToPeer(a.PeerID()) {
		if c.Stat().Direction != network.DirInbound {
			t.Fatalf("b2 dialed a although it knows nobody: %v", c.Stat().Direction)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for got := false; !got; {
		a.Send(msg(b2.Self(), 2))
		select {
		case m := <-b2.Inbox():
			got = m.StoreAge == 2 && m.From == a.Self()
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("no message reached the restarted peer; a stats %+v", a.Stats())
		}
	}
}

// SendWait waits for room in a short queue instead of dropping: every one of
// many more frames than the queue holds arrives, in order.
func TestSendWaitNeverDrops(t *testing.T) {
	t.Parallel()
	a := start(t, Config{Name: "a"})
	b := start(t, Config{Name: "b", Peers: a.Addrs(), QueueLen: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 500
	go func() {
		for i := range n {
			if err := b.SendWait(ctx, msg(a.Self(), uint64(i))); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range n {
		if m := recv(t, a); m.StoreAge != uint64(i) {
			t.Fatalf("frame %d arrived as %d", i, m.StoreAge)
		}
	}
	if d := b.Stats().Dropped; d != 0 {
		t.Fatalf("%d frames dropped", d)
	}
	if err := b.SendWait(ctx, msg(12345, 1)); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("SendWait to an unknown node: %v", err)
	}
}

// SendAll sends a loop turn's messages with one queue entry per peer: each
// peer gets its own in order, the frames counted one by one; messages to
// itself, to unknown nodes or that cannot be encoded are dropped and
// counted, and do not hold up the rest.
func TestSendAllGroupsByPeer(t *testing.T) {
	t.Parallel()
	a := start(t, Config{Name: "a"})
	b := start(t, Config{Name: "b", Peers: a.Addrs()})
	c := start(t, Config{Name: "c", Peers: a.Addrs()})
	send(t, b, msg(a.Self(), 1)) // a learns b and c from their first frames
	send(t, c, msg(a.Self(), 2))
	recv(t, a)
	recv(t, a)

	big := msg(b.Self(), 0)
	big.Name = string(make([]byte, wire.MaxNameLen+1))
	const n = 200
	var msgs []wire.Message
	for i := range uint64(n) {
		msgs = append(msgs, msg(b.Self(), 1000+i), msg(c.Self(), 5000+i))
		if i == n/2 {
			msgs = append(msgs, msg(a.Self(), 1), msg(12345, 1), big)
		}
	}
	before := a.Stats()
	if dropped := a.SendAll(msgs); dropped != 3 {
		t.Fatalf("dropped %d, want 3 (self, unknown, unencodable)", dropped)
	}
	for _, h := range []struct {
		h     *Host
		first uint64
	}{{b, 1000}, {c, 5000}} {
		for i := range uint64(n) {
			if m := recv(t, h.h); m.StoreAge != h.first+i || m.From != a.Self() {
				t.Fatalf("node %d, frame %d: got seq %d from %d", h.h.Self(), i, m.StoreAge, m.From)
			}
		}
	}
	eventually(t, "frames counted one by one, in one write a peer", func() bool {
		s := a.Stats()
		return s.FramesOut-before.FramesOut == 2*n && s.Dropped-before.Dropped == 3 && s.Writes-before.Writes == 2
	})
}

// recordLog keeps the messages of the records logged at each level.
type recordLog struct {
	mu   sync.Mutex
	msgs map[slog.Level][]string
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *recordLog) WithGroup(string) slog.Handler            { return l }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs[r.Level] = append(l.msgs[r.Level], r.Message)
	return nil
}

func (l *recordLog) count(level slog.Level, msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs[level] {
		if m == msg {
			n++
		}
	}
	return n
}

// An unreachable peer is logged as a warning at its 1st, 2nd, 4th, 8th...
// failed dial in a row, not at every redial; reached again, once.
func TestUnreachablePeerLogged(t *testing.T) {
	t.Parallel()
	kb := newKey(t)
	b := start(t, Config{Key: kb})
	logs := &recordLog{msgs: map[slog.Level][]string{}}
	a := start(t, Config{Peers: b.Addrs(), Logger: slog.New(logs)})
	send(t, a, msg(b.Self(), 1))
	recv(t, b)
	listen, _ := peer.SplitAddr(ma.StringCast(b.Addrs()[0]))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	failed := func() int {
		return logs.count(slog.LevelWarn, "p2p: peer unreachable") + logs.count(slog.LevelDebug, "p2p: dial failed")
	}
	eventually(t, "a to fail 5 dials of b", func() bool { return failed() >= 5 })
	restartOn(t, kb, listen)
	eventually(t, "a to reach b again", func() bool { return logs.count(slog.LevelInfo, "p2p: peer reachable again") == 1 })
	if warns, failures := logs.count(slog.LevelWarn, "p2p: peer unreachable"), failed(); warns != bits.Len(uint(failures)) {
		t.Fatalf("%d warnings for %d failed dials in a row, want %d", warns, failures, bits.Len(uint(failures)))
	}
}

// A question gets its answer, or the answerer's error; an unknown node or
// an oversized question fails at once.
func TestQuery(t *testing.T) {
	t.Parallel()
	a := start(t, Config{Name: "a"})
	b := start(t, Config{Name: "b", Peers: a.Addrs()})
	a.HandleQueries(func(_ context.Context, from wire.NodeID, q []byte) ([]byte, error) {
		if string(q) == "fail" {
			return nil, errors.New("no such table")
		}
		return []byte(fmt.Sprintf("%s from %d", bytes.ToUpper(q), from)), nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	eventually(t, "b to know a", func() bool { _, ok := memberOf(b, a.Self()); return ok })
	got, err := b.Query(ctx, a.Self(), []byte("locks /site"))
	if want := fmt.Sprintf("LOCKS /SITE from %d", b.Self()); err != nil || string(got) != want {
		t.Fatalf("answer %q %v, want %q", got, err, want)
	}
	if _, err := b.Query(ctx, a.Self(), []byte("fail")); !errors.Is(err, ErrQuery) || !strings.Contains(err.Error(), "no such table") {
		t.Fatalf("an answerer's error: %v", err)
	}
	if _, err := b.Query(ctx, 12345, []byte("x")); !errors.Is(err, ErrQuery) {
		t.Fatalf("an unknown node: %v", err)
	}
	if _, err := b.Query(ctx, a.Self(), make([]byte, MaxQuery+1)); !errors.Is(err, ErrQuery) {
		t.Fatalf("an oversized question: %v", err)
	}
	// Nobody answering: the stream is refused.
	if _, err := a.Query(ctx, b.Self(), []byte("x")); !errors.Is(err, ErrQuery) {
		t.Fatalf("a node that answers no questions: %v", err)
	}
}

// restartOn starts again, with key k, a host that listened on listen
// (skipping the test when the port is taken meanwhile).
func restartOn(t *testing.T, k PrivKey, listen ma.Multiaddr) *Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	h, err := New(ctx, Config{Key: k, Listen: []string{listen.String()}})
	if err != nil {
		t.Skipf("cannot listen on the old port again: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

package p2p

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/core/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const waitLimit = 10 * time.Second

func newKey(t *testing.T) crypto.PrivKey {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func idOf(t *testing.T, k crypto.PrivKey) peer.ID {
	t.Helper()
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// start starts a host closed at the end of the test; Key is generated when unset.
func start(t *testing.T, cfg Config) *Host {
	t.Helper()
	if cfg.Key == nil {
		cfg.Key = newKey(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	h, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func msg(to wire.NodeID, seq uint64) wire.Message {
	return wire.Message{Kind: wire.KindHello, To: to, StoreAge: seq, ElectionID: "n"}
}

// recv returns the next message of h, failing after waitLimit.
func recv(t *testing.T, h *Host) wire.Message {
	t.Helper()
	select {
	case m := <-h.Inbox():
		return m
	case <-time.After(waitLimit):
		t.Fatalf("node %d: no message within %v", h.Self(), waitLimit)
		return wire.Message{}
	}
}

// send sends and expects the message to be queued.
func send(t *testing.T, h *Host, m wire.Message) {
	t.Helper()
	if !h.Send(m) {
		t.Fatalf("node %d: Send to %d refused (stats %+v)", h.Self(), m.To, h.Stats())
	}
}

// eventually polls cond (state that has no channel of its own) until it
// holds, failing after waitLimit.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func memberOf(h *Host, n wire.NodeID) (Member, bool) {
	for _, m := range h.Members() {
		if m.Node == n {
			return m, true
		}
	}
	return Member{}, false
}

// waitJoined reads h.Joined until want arrives.
func waitJoined(t *testing.T, h *Host, want wire.NodeID) {
	t.Helper()
	timeout := time.After(waitLimit)
	for {
		select {
		case n := <-h.Joined():
			if n == want {
				return
			}
		case <-timeout:
			t.Fatalf("node %d never learned %d; members %+v", h.Self(), want, h.Members())
		}
	}
}

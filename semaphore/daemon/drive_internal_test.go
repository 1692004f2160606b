package daemon

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
)

// idleTransport delivers nothing and takes every send.
type idleTransport struct{}

func (idleTransport) Send(wire.Message) bool                       { return true }
func (idleTransport) SendAll([]wire.Message) int                   { return 0 }
func (idleTransport) SendWait(context.Context, wire.Message) error { return nil }
func (idleTransport) Inbox() <-chan wire.Message                   { return nil }
func (idleTransport) Joined() <-chan wire.NodeID                   { return nil }

// instantStore makes every batch durable at once and keeps nothing.
type instantStore struct{}

func (instantStore) Submit(store.Batch) <-chan error {
	c := make(chan error, 1)
	c <- nil
	return c
}
func (instantStore) Snapshot(func(string, uint64, []core.DurableTicket) error) (uint64, error) {
	return 0, nil
}
func (instantStore) Age() uint64 { return 0 }

// A stop is heard between two rounds of the messages a node sends
// itself: a chain of them that kept bringing more would otherwise hold
// the loop, and Agent.Stop waits for the loop. What is left waits for
// the loop's next turn, which selfPending brings at once.
func TestDriveHearsStopBetweenSelfRounds(t *testing.T) {
	n, err := NewNode(NodeConfig{Self: 1, Bootstrap: []wire.NodeID{1}, Peers: []wire.NodeID{1},
		ID:    election.ID{Priority: election.DefaultPriority, Address: "mem", PID: 1, Name: "n1"},
		State: store.State{Durable: core.NewDurable(), Incarnation: 1}, Transport: idleTransport{}, Store: instantStore{}})
	if err != nil {
		t.Fatal(err)
	}
	n.drive(context.Background())
	toSelf := wire.Message{Kind: wire.KindGetMax, From: 1, To: 1, Name: "/a"}
	if n.selfPending() != nil {
		t.Fatal("messages to itself pending after a drive with nothing stopping it")
	}

	stopped, stop := context.WithCancel(context.Background())
	stop()
	before := n.stats.MessagesIn
	n.loopback = append(n.loopback, toSelf)
	n.drive(stopped)
	if n.stats.MessagesIn != before || len(n.loopback) != 1 {
		t.Fatalf("a stopped drive stepped %d message(s) to itself, %d left: want 0 stepped, 1 left",
			n.stats.MessagesIn-before, len(n.loopback))
	}
	select {
	case <-n.selfPending():
	default:
		t.Fatal("messages to itself left for the next turn, but the loop would not wake for them")
	}

	n.drive(context.Background())
	if n.stats.MessagesIn != before+1 || n.selfPending() != nil {
		t.Fatalf("the next turn stepped %d message(s) to itself, pending %v: want 1, none",
			n.stats.MessagesIn-before, n.selfPending() != nil)
	}
}

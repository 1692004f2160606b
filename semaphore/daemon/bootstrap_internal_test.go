package daemon

import (
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/p2p"
)

// TestBootstrapFromPeers: --initial-members peers is this node and every
// node of --peers, each once; without peers, or beside ids, it is a clear
// configuration error.
func TestBootstrapFromPeers(t *testing.T) {
	var pids []string
	var ids []wire.NodeID
	for range 3 {
		k, err := p2p.NewIdentity()
		if err != nil {
			t.Fatal(err)
		}
		pid, err := p2p.PeerIDOf(k)
		if err != nil {
			t.Fatal(err)
		}
		pids, ids = append(pids, pid.String()), append(ids, p2p.NodeIDOf(pid))
	}
	self := ids[0]
	peers := []string{"/ip4/127.0.0.1/tcp/4001/p2p/" + pids[1], "/ip4/127.0.0.1/tcp/4002/p2p/" + pids[2],
		"/ip4/10.0.0.9/tcp/4002/p2p/" + pids[2]} // a second address of the same peer
	boot, err := bootstrap(AgentConfig{InitialMembers: []string{InitialFromPeers}, Peers: peers}, self)
	if err != nil || !slices.Equal(boot, ids) {
		t.Fatalf("peers: %v %v, want %v", boot, err, ids)
	}
	// The explicit list gives the same members.
	if boot2, err := bootstrap(AgentConfig{InitialMembers: pids}, self); err != nil || !slices.Equal(boot2, boot) {
		t.Fatalf("explicit: %v %v, want %v", boot2, err, boot)
	}
	if _, err := bootstrap(AgentConfig{InitialMembers: []string{InitialFromPeers}, Peers: peers, ClusterSize: 3}, self); err != nil {
		t.Fatalf("with --cluster-size 3: %v", err)
	}
	for name, cfg := range map[string]AgentConfig{
		"no peers":             {InitialMembers: []string{InitialFromPeers}},
		"peers and an id":      {InitialMembers: []string{InitialFromPeers, pids[1]}, Peers: peers},
		"a peer without an id": {InitialMembers: []string{InitialFromPeers}, Peers: []string{"/ip4/127.0.0.1/tcp/4001"}},
		"a wrong size":         {InitialMembers: []string{InitialFromPeers}, Peers: peers, ClusterSize: 5},
	} {
		if _, err := bootstrap(cfg, self); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

package p2p

import (
	"crypto/rand"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/sluicehq/sluice/core/wire"
)

// PrivKey is a node's identity key. The alias lets callers hold one
// without importing libp2p: this package stays the only one that does.
type PrivKey = crypto.PrivKey

// NewIdentity makes a fresh Ed25519 key, for a node without a data
// directory (in-memory dev clusters).
func NewIdentity() (PrivKey, error) {
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIdentity, err)
	}
	return k, nil
}

// PeerIDOf is the peer id of a key, as `sluice id` prints it.
func PeerIDOf(k PrivKey) (peer.ID, error) {
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrIdentity, err)
	}
	return id, nil
}

// ParsePeerIDs reads peer ids as `sluice id` prints them.
func ParsePeerIDs(ss []string) ([]peer.ID, error) {
	out := make([]peer.ID, 0, len(ss))
	for _, s := range ss {
		id, err := peer.Decode(s)
		if err != nil {
			return nil, fmt.Errorf("%w: peer id %q: %w", ErrConfig, s, err)
		}
		out = append(out, id)
	}
	return out, nil
}

// NodeIDsOf gives the node ids of peers' multiaddrs (each with /p2p/<id>),
// once each, in order.
func NodeIDsOf(addrs []string) ([]wire.NodeID, error) {
	infos, err := parsePeers(addrs)
	if err != nil {
		return nil, err
	}
	out := make([]wire.NodeID, 0, len(infos))
	for _, ai := range infos {
		out = append(out, NodeIDOf(ai.ID))
	}
	return out, nil
}

// CheckListen reports whether every listen address parses as a multiaddr.
func CheckListen(addrs []string) error {
	for _, s := range addrs {
		if _, err := ma.NewMultiaddr(s); err != nil {
			return fmt.Errorf("%w: listen address %q: %w", ErrConfig, s, err)
		}
	}
	return nil
}

// ReachableListen is the first of addrs that other machines can reach: an
// IP address that is not loopback (the unspecified 0.0.0.0 and :: listen
// on every interface), or a name. "" when all are loopback (or none).
// Addresses that do not parse are the transport's to refuse.
func ReachableListen(addrs []string) string {
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			continue
		}
		ip, err := manet.ToIP(a)
		if err != nil || !ip.IsLoopback() {
			return s
		}
	}
	return ""
}

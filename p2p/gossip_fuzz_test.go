package p2p

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// FuzzPeerInput feeds what peers send outside the lock stream to its
// parsers: a membership announcement (gossipsub runs the check inline, so
// a panic would stop the agent), a roster's entries and a query's frame.
// None may panic, and what they accept keeps their bounds: an
// announcement speaks for its author only, with at most maxAddrs
// transport addresses of that peer and a name and version of at most
// maxNameLen bytes.
func FuzzPeerInput(f *testing.F) {
	_, pub, err := crypto.GenerateEd25519Key(bytes.NewReader(make([]byte, 64)))
	if err != nil {
		f.Fatal(err)
	}
	author, err := peer.IDFromPublicKey(pub)
	if err != nil {
		f.Fatal(err)
	}
	good, err := json.Marshal(announcement{Peer: author.String(), Name: "web-1",
		Addrs: []string{"/ip4/127.0.0.1/tcp/4001", "/ip4/10.0.0.1/tcp/4001/p2p/" + author.String()}, Version: "0.9.0", Codec: 4})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`[` + string(good) + `,{"peer":"x"}]`))
	f.Add([]byte(`{"peer":"` + author.String() + `","addrs":["/ip4/1.2.3.4/tcp/1/p2p/12D3KooWLHve8N4oiQgZ2mQAQBtSPYeXXvMbpe2HWBeWkQVGo3PV"]}`))
	f.Add([]byte(`{"peer":"` + author.String() + `","addrs":["/dns4/a/tcp/1","/ip6/::1/udp/1/quic-v1","/p2p-circuit"],"codec":300}`))
	f.Add([]byte{0x85, 0x01, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		if l, err := parseAnnouncement(data, author); err == nil {
			if l.id != author || len(l.name) > maxNameLen || len(l.version) > maxNameLen || len(l.addrs) > maxAddrs {
				t.Fatalf("accepted %q as %+v", data, l)
			}
			for _, a := range l.addrs {
				if _, pid := peer.SplitAddr(a); pid != "" {
					t.Fatalf("kept address %s with a peer id", a)
				}
				if _, err := a.ValueForProtocol(ma.P_P2P); err == nil {
					t.Fatalf("kept address %s with a /p2p part", a)
				}
			}
		}
		var list []announcement
		if json.Unmarshal(data, &list) == nil {
			for _, a := range list {
				id, addrs, err := rosterEntry(a)
				if err != nil {
					continue
				}
				if len(addrs) > maxAddrs || id.Validate() != nil {
					t.Fatalf("roster entry %+v accepted as %s with %d addresses", a, id, len(addrs))
				}
			}
		}
		b, err := readQueryFrame(bufio.NewReader(bytes.NewReader(data)), 1<<10)
		if err == nil && len(b) > 1<<10 {
			t.Fatalf("query frame of %d bytes read past its limit", len(b))
		}
	})
}

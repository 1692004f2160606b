package p2p

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
)

// RosterProtocol hands a starting host the members a peer knows: one
// stream, one JSON list of announcements (peer, name, addresses) in
// answer to nothing. Announcements come rarely once a fleet runs, so a
// host that starts late would otherwise learn of the others only as they
// re-announce, and meanwhile pick gossip peers from the few it knows.
const RosterProtocol protocol.ID = "/sluice/roster/1"

const (
	// maxRoster caps a roster's bytes: some thousands of members.
	maxRoster = 4 << 20
	// rosterWait bounds one roster's exchange.
	rosterWait = 10 * time.Second
)

// serveRoster answers a roster stream with the members this host knows,
// itself among them.
func (h *Host) serveRoster(s network.Stream) {
	if !h.enter() {
		_ = s.Reset()
		return
	}
	defer h.wg.Done()
	_ = s.SetDeadline(time.Now().Add(rosterWait))
	list := []announcement{{Peer: h.host.ID().String(), Name: h.name, Addrs: h.Addrs()}}
	now := time.Now()
	h.mu.RLock()
	for _, m := range h.members {
		if len(m.addrs) > 0 {
			list = append(list, announcement{Peer: m.id.String(), Name: m.name, Addrs: p2pAddrs(m.id, m.addrs),
				Unheard: int64(now.Sub(m.heard) / time.Second)})
		}
	}
	h.mu.RUnlock()
	b, err := json.Marshal(list)
	if err != nil || len(b) > maxRoster {
		_ = s.Reset()
		return
	}
	if _, err := s.Write(b); err != nil {
		_ = s.Reset()
		return
	}
	_ = s.Close()
}

// fetchRoster asks m for the members it knows and adds them. It reports
// whether m answered.
func (h *Host) fetchRoster(m *member) bool {
	ctx, cancel := context.WithTimeout(h.ctx, rosterWait)
	defer cancel()
	s, err := h.host.NewStream(ctx, m.id, RosterProtocol)
	if err != nil {
		return false
	}
	_ = s.SetDeadline(time.Now().Add(rosterWait))
	_ = s.CloseWrite()
	b, err := io.ReadAll(io.LimitReader(s, maxRoster+1))
	_ = s.Close()
	if err != nil || len(b) > maxRoster {
		h.log.Debug("p2p: roster not read", "peer", m.id, "bytes", len(b), "err", err)
		return false
	}
	var list []announcement
	if err := json.Unmarshal(b, &list); err != nil {
		h.stats.malformed.Add(1)
		h.log.Warn("p2p: bad roster", "peer", m.id, "err", err)
		return true // asked and answered: another peer would not say better
	}
	added := 0
	for _, a := range list {
		id, addrs, err := rosterEntry(a)
		if err != nil {
			h.stats.malformed.Add(1)
			continue
		}
		// Hearsay, unlike a signed announcement: it never replaces what
		// is known, and a wrong address only fails to dial, since a
		// connection proves the peer's identity.
		h.mu.RLock()
		known := h.members[NodeIDOf(id)] != nil
		h.mu.RUnlock()
		unheard := time.Duration(min(max(a.Unheard, 0), 1<<32)) * time.Second
		if known || h.forget >= 0 && unheard > h.forget {
			continue // known, or long gone: this host would forget it at once
		}
		if h.addMember(id, a.Name, addrs, true) {
			added++
			h.mu.Lock()
			if m := h.members[NodeIDOf(id)]; m != nil {
				m.heard = m.heard.Add(-unheard) // as long unheard as the peer says
			}
			h.mu.Unlock()
		}
	}
	h.log.Debug("p2p: roster read", "peer", m.id, "members", len(list), "new", added)
	return true
}

// rosterEntry checks one member of a roster as an announcement is checked.
func rosterEntry(a announcement) (peer.ID, []ma.Multiaddr, error) {
	id, err := peer.Decode(a.Peer)
	if err != nil {
		return "", nil, err
	}
	if len(a.Name) > maxNameLen || len(a.Addrs) > maxAddrs {
		return "", nil, fmt.Errorf("name of %d bytes or %d addresses", len(a.Name), len(a.Addrs))
	}
	var addrs []ma.Multiaddr
	for _, s := range a.Addrs {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return "", nil, err
		}
		tr, pid := peer.SplitAddr(m)
		if tr == nil || (pid != "" && pid != id) {
			return "", nil, fmt.Errorf("address %q is not one of %s", s, id)
		}
		addrs = append(addrs, tr)
	}
	return id, addrs, nil
}

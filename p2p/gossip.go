package p2p

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/sluicehq/sluice/core/wire"
)

// announcement is what a host publishes about itself on MembersTopic.
type announcement struct {
	Peer  string   `json:"peer"`
	Name  string   `json:"name,omitempty"`
	Addrs []string `json:"addrs,omitempty"`
	// Version is the release the agent runs, Codec the newest wire codec
	// it reads. An older agent ignores them, as it ignores any field it
	// does not know, and announces neither.
	Version string `json:"version,omitempty"`
	Codec   int    `json:"codec,omitempty"`
	// Unheard, in a roster only, is how many seconds the host that
	// serves it has gone without word of the member: hearsay must not
	// make a machine gone for good look alive again (Config.ForgetAfter).
	Unheard int64 `json:"unheard_s,omitempty"`
}

// learned is a validated announcement, handed from the validator to the reader.
type learned struct {
	id      peer.ID
	name    string
	addrs   []ma.Multiaddr
	version string
	codec   byte
}

const (
	maxNameLen = 256
	maxAddrs   = 32
	// A host announces itself at start, then again after announceFirst,
	// each gap twice the last up to announceMax, jittered: the first ones
	// reach a mesh that is still forming, the later ones are a refresh.
	// Every host hears every announcement, so a fleet of N hosts costs
	// each about N/announceMax of them a second: rare enough to stay
	// small where N is a thousand.
	announceFirst = time.Second
	announceMax   = 10 * time.Minute
)

func (h *Host) startGossip() error {
	ps, err := pubsub.NewGossipSub(h.ctx, h.host,
		pubsub.WithLogger(h.log),
		// Only our topic: a peer cannot make us track others.
		pubsub.WithSubscriptionFilter(pubsub.NewAllowlistSubscriptionFilter(MembersTopic)),
		pubsub.WithMaxMessageSize(64<<10),
	)
	if err != nil {
		return fmt.Errorf("p2p: gossipsub: %w", err)
	}
	if err := ps.RegisterTopicValidator(MembersTopic, h.validate, pubsub.WithValidatorInline(true)); err != nil {
		return fmt.Errorf("p2p: gossipsub validator: %w", err)
	}
	topic, err := ps.Join(MembersTopic)
	if err != nil {
		return fmt.Errorf("p2p: join %s: %w", MembersTopic, err)
	}
	sub, err := topic.Subscribe()
	if err != nil {
		return fmt.Errorf("p2p: subscribe %s: %w", MembersTopic, err)
	}
	h.ps, h.topic, h.sub = ps, topic, sub
	return nil
}

// validate accepts an announcement only when it is small, well formed, and
// speaks for its signed author: a peer cannot announce somebody else.
func (h *Host) validate(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	l, err := parseAnnouncement(msg.GetData(), msg.GetFrom())
	if err != nil {
		if !msg.Local {
			h.stats.malformed.Add(1)
			h.log.Warn("p2p: bad announcement", "from", msg.ReceivedFrom, "err", err)
		}
		return pubsub.ValidationReject
	}
	msg.ValidatorData = l
	return pubsub.ValidationAccept
}

func parseAnnouncement(data []byte, author peer.ID) (*learned, error) {
	if len(data) > maxAnnouncement {
		return nil, fmt.Errorf("%d bytes, over %d", len(data), maxAnnouncement)
	}
	var a announcement
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, err
	}
	id, err := peer.Decode(a.Peer)
	if err != nil {
		return nil, fmt.Errorf("peer id: %w", err)
	}
	if id != author {
		return nil, fmt.Errorf("announces %s but was published by %s", id, author)
	}
	if len(a.Name) > maxNameLen || len(a.Addrs) > maxAddrs || len(a.Version) > maxNameLen {
		return nil, fmt.Errorf("name of %d bytes, version of %d or %d addresses", len(a.Name), len(a.Version), len(a.Addrs))
	}
	if a.Codec < 0 || a.Codec > 255 {
		return nil, fmt.Errorf("codec %d", a.Codec)
	}
	l := &learned{id: id, name: a.Name, version: a.Version, codec: byte(a.Codec)}
	for _, s := range a.Addrs {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", s, err)
		}
		tr, pid := peer.SplitAddr(m)
		if tr == nil || (pid != "" && pid != id) {
			return nil, fmt.Errorf("address %q is not one of %s", s, id)
		}
		l.addrs = append(l.addrs, tr)
	}
	return l, nil
}

// announce publishes this host's announcement at start, then after
// growing gaps (announceFirst to announceMax).
func (h *Host) announce() {
	defer h.wg.Done()
	gap := announceFirst
	t := time.NewTimer(gap) // reset after each announcement
	defer t.Stop()
	for {
		data, err := json.Marshal(announcement{Peer: h.host.ID().String(), Name: h.name, Addrs: h.Addrs(), Version: h.version, Codec: int(h.codec)})
		if err == nil {
			ctx, cancel := context.WithTimeout(h.ctx, publishTimeout)
			err = h.topic.Publish(ctx, data)
			cancel()
		}
		if err != nil && h.ctx.Err() == nil {
			h.log.Debug("p2p: publish announcement", "err", err)
		}
		// Jittered by a quarter either way, so that hosts started together
		// do not announce together.
		t.Reset(gap*3/4 + rand.N(gap/2+1))
		gap = min(2*gap, announceMax)
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readAnnouncements folds others' announcements into the members.
func (h *Host) readAnnouncements() {
	defer h.wg.Done()
	for {
		msg, err := h.sub.Next(h.ctx)
		if err != nil {
			return // canceled by Close
		}
		l, ok := msg.ValidatorData.(*learned)
		if !ok || msg.Local || l.id == h.host.ID() {
			continue
		}
		h.stats.announcements.Add(1)
		h.addMember(l.id, l.name, l.addrs, true)
		h.setVersion(NodeIDOf(l.id), l.version, l.codec)
		// Dial now rather than at the next tick; the dial uses the addresses just learned.
		h.poke()
	}
}

// setVersion records the release and the newest codec node announced.
func (h *Host) setVersion(node wire.NodeID, version string, codec byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.members[node]; m != nil {
		m.version, m.reads = version, codec
	}
}

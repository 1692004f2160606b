package p2p

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/sluicehq/sluice/core/wire"
)

const (
	// LockProtocol carries the frames of the core and the election, in
	// codec 4 (wire.Version).
	LockProtocol protocol.ID = "/sluice/lock/2"
	// LockProtocolCodec3 carries them in codec 3, for the agents of the
	// previous release, which speak nothing newer.
	LockProtocolCodec3 protocol.ID = "/sluice/lock/1"
	// MembersTopic is the gossipsub topic of membership announcements.
	MembersTopic = "/sluice/members/1"

	defaultListen   = "/ip4/127.0.0.1/tcp/0"
	defaultQueueLen = 1024
	inboxLen        = 4096
	joinedLen       = 256

	dialTimeout     = 5 * time.Second
	streamTimeout   = 5 * time.Second
	writeTimeout    = 5 * time.Second
	bodyTimeout     = 10 * time.Second
	publishTimeout  = 5 * time.Second
	maintainEvery   = 500 * time.Millisecond
	backoffMin      = 100 * time.Millisecond
	backoffMax      = 5 * time.Second
	maxAnnouncement = 4 << 10
	// Announced addresses outlive the longest gap between two
	// announcements of a live peer, with room for lost ones.
	announcedAddrTTL = 3 * announceMax
	// writerBatch is how much a writer gathers before one flush.
	writerBatch = 64 << 10
	// writerIdle is how long a peer's writer waits for a frame before it
	// closes its stream and ends: a fleet's agents talk to few peers at a
	// time, and a writer per known peer would cost memory by the fleet.
	writerIdle = 30 * time.Second
	// trimIdle is how long a connection this host dialed to a peer it
	// neither keeps nor writes to stays open before it is closed.
	trimIdle = 10 * time.Second
	// gossipPeers is how many peers beyond the kept ones a host keeps
	// connected: its fingers on the ring of the members' node ids, at
	// distances 1, 2, 4, 8..., so that the membership topic reaches
	// everyone in a few hops while each host has about twice as many
	// gossip connections, whatever the size of the fleet.
	gossipPeers = 4
	protectTag  = "sluice-member"
	writingTag  = "sluice-writing"
)

// lockProtocols are the lock protocols this build speaks, newest first,
// each with the codec of its frames: a writer opens its stream with all of
// them, and the peer takes the newest it speaks too.
var lockProtocols = []struct {
	id    protocol.ID
	codec byte
}{{LockProtocol, wire.Version}, {LockProtocolCodec3, wire.MinVersion}}

// lockProtocolIDs are the ids of the lock protocols of codecs up to
// newest, newest first.
func lockProtocolIDs(newest byte) []protocol.ID {
	var ids []protocol.ID
	for _, p := range lockProtocols {
		if p.codec <= newest {
			ids = append(ids, p.id)
		}
	}
	return ids
}

// codecOf is the codec of protocol id; 0 for one that is not a lock
// protocol.
func codecOf(id protocol.ID) byte {
	for _, p := range lockProtocols {
		if p.id == id {
			return p.codec
		}
	}
	return 0
}

// Config configures a Host.
type Config struct {
	// Key is the node's identity; required.
	Key crypto.PrivKey
	// Listen are multiaddrs to listen on; default 127.0.0.1 on a free TCP port.
	Listen []string
	// Peers are multiaddrs ending in /p2p/<id>, dialed at start and kept connected.
	Peers []string
	// PSK, when set, is the 32-byte key of a private network (TCP only).
	PSK []byte
	// AllowList, when non-empty, is the only peers a connection is admitted from or to.
	AllowList []peer.ID
	// MaxFrame caps an inbound frame; default wire.MaxFrameSize + 64.
	MaxFrame int
	// QueueLen is the per-peer outbound queue; default 1024.
	QueueLen int
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Name is the human node name carried in announcements.
	Name string
	// Version is the release this agent runs, carried in announcements so
	// that every member can tell which versions the cluster runs; empty:
	// not announced.
	Version string
	// ForgetAfter is how long a member that is neither a configured peer
	// nor kept (Keep) may go unheard before the host forgets it: no
	// announcement, no inbound stream, no connection. A live peer
	// announces at least every announceMax, so only a machine gone for
	// good (a web tier replaces them all the time) is forgotten; without
	// forgetting, the ring, the redials and the roster would keep every
	// machine the fleet ever had. A forgotten peer that comes back is
	// learned again from its next announcement or connection. Zero:
	// three times announceMax (30 minutes); negative: never.
	ForgetAfter time.Duration

	// maxCodec, when set, is the newest codec the host speaks: a host of
	// the previous release, for tests of mixed clusters.
	maxCodec byte
}

// Member is a cluster peer as this host knows it.
type Member struct {
	Node      wire.NodeID
	Peer      peer.ID
	Name      string
	Addrs     []string
	Connected bool
	// Version is the release the peer announced; empty when it announced
	// none (it runs a release older than announcements of versions).
	Version string
	// Codec is the wire codec the peer reads: the one its lock stream was
	// opened in, else the newest its announcement or identify claimed; 0
	// when not known yet. A claim never sets what is written to it.
	Codec byte
}

// Stats are cumulative counters of a Host.
type Stats struct {
	FramesIn  uint64 // frames decoded and delivered to Inbox
	FramesOut uint64 // frames flushed to a peer's stream
	// Writes counts the flushes of frames to peers' streams: a SendAll's
	// frames to one peer, and what queued behind them, go in one, so
	// Writes against FramesOut says how much the batching saves.
	Writes uint64
	// Malformed counts undecodable frames and rejected announcements.
	Malformed uint64
	Oversized uint64 // frames whose length is over MaxFrame
	// Dropped counts frames not delivered: Send refused them (unknown peer,
	// full queue, encoding error) or the stream failed under them.
	Dropped uint64
	// Resets counts lock streams this host reset (write failure, bad frame).
	Resets uint64
	// Refused counts frames of a codec, a kind or a must-understand field
	// this build does not know: dropped one by one, the stream kept.
	Refused uint64
	// Dials and DialFailures count connection attempts and lock stream opens.
	Dials         uint64
	DialFailures  uint64
	Announcements uint64 // valid announcements received from others
	Forgotten     uint64 // members forgotten after ForgetAfter unheard
}

type counters struct {
	framesIn, framesOut, writes, malformed, oversized, dropped, resets, refused, dials, dialFailures, announcements, forgotten atomic.Uint64
}

// member is the state of one known peer: a peer that goes away is
// forgotten once unheard for Config.ForgetAfter. Its queue is made on the
// first frame to it, and its writer runs while frames come.
type member struct {
	id    peer.ID
	node  wire.NodeID
	name  string
	addrs []ma.Multiaddr // transport addresses, without /p2p
	queue chan frames    // nil until the first frame; set under Host.mu
	// protecting orders a writer's start and end with their Protect and
	// Unprotect (see ensureWriter); taken before Host.mu.
	protecting sync.Mutex
	// codec is the codec the peer's lock stream was opened in, the one
	// frames to it are written in; 0 before the first stream opened, when
	// they are written in wire.MinVersion, which every peer reads.
	codec atomic.Uint32

	// guarded by Host.mu
	version  string // the release the peer announced
	reads    byte   // the newest codec the peer announced it reads
	dialing  bool
	nextDial time.Time
	backoff  backoff
	// writing: its writer runs; kept: maintain keeps it connected (and
	// protected from the connection manager); used is when it was last
	// kept or written to, which an unkept connection is trimmed after.
	writing, kept bool
	used          time.Time
	// heard is when the peer last showed it is alive: its announcement,
	// an inbound stream, a connection (or when it was learned).
	heard    time.Time
	querying int // queries to it under way
	// failures counts the dials that failed in a row since the peer was
	// last reached (or since the start); downSince is when the first did.
	failures  int
	downSince time.Time
}

// Host is a node of the mesh.
type Host struct {
	host     host.Host
	ps       *pubsub.PubSub
	topic    *pubsub.Topic
	sub      *pubsub.Subscription
	self     wire.NodeID
	name     string
	version  string
	codec    byte // the newest codec this host speaks
	log      *slog.Logger
	maxFrame int
	queueLen int
	forget   time.Duration // Config.ForgetAfter, defaulted (negative: never)
	allow    map[peer.ID]struct{}

	ctx    context.Context // canceled by Close; bounds every blocking call
	cancel context.CancelFunc
	wg     sync.WaitGroup

	inbox  chan wire.Message
	joined chan wire.NodeID
	kick   chan struct{}
	stats  counters

	mu      sync.RWMutex
	closed  bool
	members map[wire.NodeID]*member
	// configured are the peers of Config.Peers and wanted the runtime's
	// (Keep): both always kept connected. gossip are the ring fingers,
	// worked out again when ringStale (a member was added).
	configured, wanted map[wire.NodeID]bool
	gossip             map[wire.NodeID]bool
	ringStale          bool
	// rostered: a peer handed this host the members it knows (once per
	// start); rostering: one is being asked.
	rostered, rostering bool
}

// New starts a host: it listens, joins the membership topic and starts
// dialing Config.Peers. ctx bounds start-up only.
func New(ctx context.Context, cfg Config) (*Host, error) {
	cfg, err := checkConfig(cfg)
	if err != nil {
		return nil, err
	}
	peers, err := parsePeers(cfg.Peers)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lh, allow, err := startLibp2p(cfg)
	if err != nil {
		return nil, err
	}

	hctx, cancel := context.WithCancel(context.Background())
	h := &Host{
		host:       lh,
		self:       NodeIDOf(lh.ID()),
		name:       cfg.Name,
		version:    cfg.Version,
		codec:      cmp.Or(cfg.maxCodec, wire.Version),
		log:        cfg.Logger,
		maxFrame:   cfg.MaxFrame,
		queueLen:   cfg.QueueLen,
		forget:     cmp.Or(cfg.ForgetAfter, 3*announceMax),
		allow:      allow,
		ctx:        hctx,
		cancel:     cancel,
		inbox:      make(chan wire.Message, inboxLen),
		joined:     make(chan wire.NodeID, joinedLen),
		kick:       make(chan struct{}, 1),
		members:    make(map[wire.NodeID]*member),
		configured: make(map[wire.NodeID]bool),
	}
	fail := func(err error) (*Host, error) {
		cancel()
		_ = lh.Close()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if err := h.startGossip(); err != nil {
		return fail(err)
	}
	for _, id := range lockProtocolIDs(h.codec) {
		lh.SetStreamHandler(id, h.handleStream)
	}
	lh.SetStreamHandler(RosterProtocol, h.serveRoster)
	h.addConfiguredPeers(peers)
	h.wg.Add(3)
	go h.maintain()
	go h.announce()
	go h.readAnnouncements()
	h.poke()
	return h, nil
}

// checkConfig refuses a config New cannot run with and fills in the
// defaults.
func checkConfig(cfg Config) (Config, error) {
	if cfg.Key == nil {
		return cfg, fmt.Errorf("%w: no key", ErrConfig)
	}
	if cfg.PSK != nil && len(cfg.PSK) != 32 {
		return cfg, fmt.Errorf("%w: PSK of %d bytes, want 32", ErrConfig, len(cfg.PSK))
	}
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = wire.MaxFrameSize + 64
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = defaultQueueLen
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Listen) == 0 {
		cfg.Listen = []string{defaultListen}
	}
	return cfg, nil
}

// startLibp2p starts the libp2p host of cfg and returns it with its
// allow-list (nil: every peer allowed).
func startLibp2p(cfg Config) (host.Host, map[peer.ID]struct{}, error) {
	rm, err := resourceManager()
	if err != nil {
		return nil, nil, fmt.Errorf("p2p: resource manager: %w", err)
	}
	opts := []libp2p.Option{
		libp2p.Identity(cfg.Key),
		libp2p.ListenAddrStrings(cfg.Listen...),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.ResourceManager(rm),
		libp2p.DisableRelay(),
		libp2p.DisableMetrics(), // metrics would register in the global prometheus registry
		libp2p.Ping(false),
		libp2p.WithDialTimeout(dialTimeout),
	}
	if cfg.Version != "" {
		// Identify tells every peer at once, before any announcement.
		opts = append(opts, libp2p.UserAgent(userAgentPrefix+cfg.Version))
	}
	if cfg.PSK != nil {
		opts = append(opts, libp2p.PrivateNetwork(cfg.PSK))
	}
	var allow map[peer.ID]struct{}
	if len(cfg.AllowList) > 0 {
		allow = make(map[peer.ID]struct{}, len(cfg.AllowList))
		for _, p := range cfg.AllowList {
			allow[p] = struct{}{}
		}
		opts = append(opts, libp2p.ConnectionGater(allowGater{allow}))
	}
	lh, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		return nil, nil, fmt.Errorf("p2p: start libp2p: %w", err)
	}
	return lh, allow, nil
}

// addConfiguredPeers makes members of the configured peers, but not of
// this node or of peers off the allow-list.
func (h *Host) addConfiguredPeers(peers []peer.AddrInfo) {
	for _, ai := range peers {
		if ai.ID == h.host.ID() {
			continue // a shared peer list may name this node too
		}
		if _, ok := h.allow[ai.ID]; h.allow != nil && !ok {
			h.log.Warn("p2p: configured peer is not on the allow-list, ignored", "peer", ai.ID)
			continue
		}
		// Configured addresses never expire: they are how we find the cluster again.
		h.host.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.PermanentAddrTTL)
		h.addMember(ai.ID, "", ai.Addrs, false) // AddAddrs never shortens the permanent TTL
		h.configured[NodeIDOf(ai.ID)] = true    // before maintain starts: no lock needed
	}
}

func parsePeers(addrs []string) ([]peer.AddrInfo, error) {
	byID := map[peer.ID]*peer.AddrInfo{}
	var order []peer.ID
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("%w: peer %q: %w", ErrConfig, s, err)
		}
		tr, id := peer.SplitAddr(a)
		if id == "" {
			return nil, fmt.Errorf("%w: peer %q has no /p2p/<id>", ErrConfig, s)
		}
		ai := byID[id]
		if ai == nil {
			ai = &peer.AddrInfo{ID: id}
			byID[id] = ai
			order = append(order, id)
		}
		if tr != nil {
			ai.Addrs = append(ai.Addrs, tr)
		}
	}
	out := make([]peer.AddrInfo, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	return out, nil
}

// resourceManager has the default scaled limits plus explicit ones for the
// lock protocol: a peer needs one stream each way, a few more while a broken
// one is replaced.
func resourceManager() (network.ResourceManager, error) {
	limits := rcmgr.DefaultLimits
	// Clone the maps so the shared DefaultLimits is never written.
	limits.ServiceLimits = maps.Clone(limits.ServiceLimits)
	limits.ServicePeerLimits = maps.Clone(limits.ServicePeerLimits)
	limits.ProtocolLimits = maps.Clone(limits.ProtocolLimits)
	limits.ProtocolPeerLimits = maps.Clone(limits.ProtocolPeerLimits)
	limits.PeerLimits = maps.Clone(limits.PeerLimits)
	libp2p.SetDefaultServiceLimits(&limits)
	for _, p := range lockProtocols {
		limits.AddProtocolPeerLimit(p.id,
			rcmgr.BaseLimit{StreamsInbound: 8, StreamsOutbound: 8, Streams: 16, Memory: 64 << 20},
			rcmgr.BaseLimitIncrease{})
	}
	limits.AddProtocolPeerLimit(RosterProtocol,
		rcmgr.BaseLimit{StreamsInbound: 2, StreamsOutbound: 2, Streams: 4, Memory: 2 * maxRoster},
		rcmgr.BaseLimitIncrease{})
	limits.AddProtocolPeerLimit(QueryProtocol,
		rcmgr.BaseLimit{StreamsInbound: 4, StreamsOutbound: 4, Streams: 8, Memory: 2 * MaxAnswer},
		rcmgr.BaseLimitIncrease{})
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()))
}

// Self is this node's id.
func (h *Host) Self() wire.NodeID { return h.self }

// PeerID is this node's libp2p peer id.
func (h *Host) PeerID() peer.ID { return h.host.ID() }

// Addrs are the listen addresses, with ports resolved and /p2p/<id> appended.
func (h *Host) Addrs() []string {
	return p2pAddrs(h.host.ID(), h.host.Addrs())
}

func p2pAddrs(id peer.ID, addrs []ma.Multiaddr) []string {
	full, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: id, Addrs: addrs})
	if err != nil {
		return nil
	}
	out := make([]string, len(full))
	for i, a := range full {
		out[i] = a.String()
	}
	return out
}

// Inbox delivers messages from peers, From set to the authenticated sender.
// It is never closed.
func (h *Host) Inbox() <-chan wire.Message { return h.inbox }

// Joined delivers the node ids of peers learned after New returned (from an
// announcement or an inbound stream); Config.Peers are in Members from the
// start and are not sent. Ids are dropped when nobody reads. Never closed.
func (h *Host) Joined() <-chan wire.NodeID { return h.joined }

// Reach counts the cluster peers this host is connected to, and those it
// knows.
func (h *Host) Reach() (connected, known int) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, m := range h.members {
		if h.host.Network().Connectedness(m.id) == network.Connected {
			connected++
		}
	}
	return connected, len(h.members)
}

// Conns counts the peers this host has a connection to, members or not:
// in, those whose first connection the peer dialed, out the others.
func (h *Host) Conns() (in, out int) {
	nw := h.host.Network()
	for _, p := range nw.Peers() {
		if cs := nw.ConnsToPeer(p); len(cs) > 0 && cs[0].Stat().Direction == network.DirInbound {
			in++
		} else {
			out++
		}
	}
	return in, out
}

// MeshDebug says, for tests, which connected peers this host keeps and
// writes to.
func (h *Host) MeshDebug() string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var b strings.Builder
	for node, m := range h.members {
		if h.host.Network().Connectedness(m.id) != network.Connected {
			continue
		}
		dir := "out"
		if cs := h.host.Network().ConnsToPeer(m.id); len(cs) > 0 && cs[0].Stat().Direction == network.DirInbound {
			dir = "in"
		}
		fmt.Fprintf(&b, "%s(%s kept=%v conf=%v want=%v gossip=%v writing=%v idle=%v) ", m.name, dir, m.kept, h.configured[node], h.wanted[node], h.gossip[node], m.writing, time.Since(m.used).Round(time.Second))
	}
	return b.String()
}

// Members lists every known cluster peer, sorted by Node.
func (h *Host) Members() []Member {
	h.mu.RLock()
	out := make([]Member, 0, len(h.members))
	for _, m := range h.members {
		addrs := m.addrs
		if len(addrs) == 0 {
			addrs = h.host.Peerstore().Addrs(m.id)
		}
		version, reads := m.version, m.reads
		if version == "" || reads == 0 {
			version, reads = h.identified(m.id, version, reads)
		}
		out = append(out, Member{
			Node:      m.node,
			Peer:      m.id,
			Name:      m.name,
			Addrs:     p2pAddrs(m.id, addrs),
			Connected: h.host.Network().Connectedness(m.id) == network.Connected,
			Version:   version,
			Codec:     cmp.Or(byte(m.codec.Load()), reads),
		})
	}
	h.mu.RUnlock()
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	return out
}

// userAgentPrefix begins the libp2p agent version of a sluice agent that
// knows its release: "sluice/0.9.0".
const userAgentPrefix = "sluice/"

// identified fills in the release and the newest codec of id from what
// libp2p's identify learned of it (its agent version and protocols), when
// its announcement did not say them yet.
func (h *Host) identified(id peer.ID, version string, codec byte) (string, byte) {
	ps := h.host.Peerstore()
	if version == "" {
		if av, err := ps.Get(id, "AgentVersion"); err == nil {
			if s, ok := av.(string); ok && strings.HasPrefix(s, userAgentPrefix) && len(s) <= maxNameLen {
				version = strings.TrimPrefix(s, userAgentPrefix)
			}
		}
	}
	if codec == 0 {
		if ids, err := ps.SupportsProtocols(id, lockProtocolIDs(wire.Version)...); err == nil {
			for _, p := range ids {
				codec = max(codec, codecOf(p))
			}
		}
	}
	return version, codec
}

// Stats returns the counters.
func (h *Host) Stats() Stats {
	c := &h.stats
	return Stats{
		FramesIn:      c.framesIn.Load(),
		FramesOut:     c.framesOut.Load(),
		Writes:        c.writes.Load(),
		Malformed:     c.malformed.Load(),
		Oversized:     c.oversized.Load(),
		Dropped:       c.dropped.Load(),
		Resets:        c.resets.Load(),
		Dials:         c.dials.Load(),
		DialFailures:  c.dialFailures.Load(),
		Announcements: c.announcements.Load(),
		Forgotten:     c.forgotten.Load(),
		Refused:       c.refused.Load(),
	}
}

// Close stops every goroutine of the host and closes libp2p. It is idempotent.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	h.cancel() // also stops pubsub, whose life is h.ctx
	for _, p := range lockProtocols {
		h.host.RemoveStreamHandler(p.id)
	}
	h.host.RemoveStreamHandler(RosterProtocol)
	err := h.host.Close()
	h.wg.Wait()
	return err
}

// enter registers a goroutine of the host; false once the host is closed, so
// nothing is added to the WaitGroup after Close started waiting.
func (h *Host) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Add(1)
	return true
}

// addMember records a peer, starting its writer. name and addrs, when set,
// replace what was known. It reports whether the peer is new.
func (h *Host) addMember(id peer.ID, name string, addrs []ma.Multiaddr, notify bool) bool {
	if id == h.host.ID() {
		return false
	}
	if h.allow != nil {
		if _, ok := h.allow[id]; !ok {
			return false // the gater would refuse it anyway
		}
	}
	node := NodeIDOf(id)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	m := h.members[node]
	if m != nil {
		if m.id != id {
			h.mu.Unlock()
			h.log.Error("p2p: node id collision, peer ignored", "peer", id, "node", node, "holder", m.id)
			return false
		}
		if name != "" {
			m.name = name
		}
		if len(addrs) > 0 {
			m.addrs = addrs
		}
		// Every caller but a roster's (new members only) has word from
		// the peer itself: an announcement, an inbound stream.
		m.heard = time.Now()
		h.mu.Unlock()
		h.rememberAddrs(id, addrs)
		return false
	}
	m = &member{id: id, node: node, name: name, addrs: addrs, used: time.Now(), heard: time.Now()}
	m.backoff.reset()
	h.members[node] = m
	h.ringStale = true
	h.mu.Unlock()

	h.rememberAddrs(id, addrs)
	h.log.Info("p2p: member added", "peer", id, "node", node, "name", name)
	if notify {
		select {
		case h.joined <- node:
		default:
		}
	}
	return true
}

// rememberAddrs puts announced addresses in the peerstore, where the
// writer's NewStream finds them when it has to dial. They outlive a short
// partition and the gap between two announcements of a live peer.
func (h *Host) rememberAddrs(id peer.ID, addrs []ma.Multiaddr) {
	if len(addrs) > 0 {
		h.host.Peerstore().AddAddrs(id, addrs, announcedAddrTTL)
	}
}

// poke wakes the maintenance goroutine without blocking.
func (h *Host) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Keep names the nodes this host keeps connected besides its configured
// peers and its gossip peers: the runtime's voters, which it talks to all
// the time. Any other member is dialed when a frame is sent to it, and a
// connection this host dialed is closed once it is no longer used.
func (h *Host) Keep(nodes []wire.NodeID) {
	want := make(map[wire.NodeID]bool, len(nodes))
	for _, n := range nodes {
		if n != h.self {
			want[n] = true
		}
	}
	h.mu.Lock()
	same := maps.Equal(want, h.wanted)
	h.wanted = want
	h.mu.Unlock()
	if !same {
		h.poke()
	}
}

// keeps reports whether maintain keeps node connected; h.mu held.
func (h *Host) keeps(node wire.NodeID) bool {
	return h.configured[node] || h.wanted[node] || h.gossip[node]
}

// fingers are the gossip peers of self among the known nodes: the nodes
// 1, 2, 4... places after it (gossipPeers of them) on the ring of node
// ids. Every host picks its own, so each is picked by about as many hosts
// as it picks: a host's gossip connections stay near 2·gossipPeers.
func fingers(self wire.NodeID, known []wire.NodeID) map[wire.NodeID]bool {
	ring := append(slices.Clone(known), self)
	slices.Sort(ring)
	ring = slices.Compact(ring)
	i, _ := slices.BinarySearch(ring, self)
	out := make(map[wire.NodeID]bool, gossipPeers)
	for k, d := 0, 1; k < gossipPeers && d < len(ring); k, d = k+1, 2*d {
		out[ring[(i+d)%len(ring)]] = true
	}
	return out
}

// maintain keeps the kept members connected, each redialed with its own
// backoff, and closes the connections it dialed to members it no longer
// keeps or writes to.
func (h *Host) maintain() {
	defer h.wg.Done()
	t := time.NewTicker(maintainEvery)
	defer t.Stop()
	cm := h.host.ConnManager()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		case <-h.kick:
		}
		now := time.Now()
		var protect, unprotect []peer.ID
		var trim []trimmed
		var forgotten []*member
		var roster *member
		h.mu.Lock()
		if h.ringStale {
			h.gossip = fingers(h.self, slices.Collect(maps.Keys(h.members)))
			h.ringStale = false
		}
		for node, m := range h.members {
			connected := h.host.Network().Connectedness(m.id) == network.Connected
			if connected {
				m.heard = now
			} else if h.forgets(node, m, now) {
				delete(h.members, node)
				h.ringStale = true
				forgotten = append(forgotten, m)
				continue
			}
			keep := h.keeps(node)
			if keep != m.kept {
				if m.kept = keep; keep {
					protect = append(protect, m.id)
				} else {
					unprotect = append(unprotect, m.id)
				}
			}
			if !keep {
				if connected && !m.writing && m.querying == 0 && now.Sub(m.used) > trimIdle {
					trim = append(trim, trimmed{m.id, m.name})
				}
				continue
			}
			m.used = now
			if connected {
				m.backoff.reset()
				m.nextDial = time.Time{}
				if !h.rostered && !h.rostering && (roster == nil || h.configured[node]) {
					roster = m // a configured peer rather than a gossip peer
				}
				continue
			}
			if m.dialing || now.Before(m.nextDial) || h.closed {
				continue
			}
			m.dialing = true
			h.wg.Add(1) // this goroutine holds a count, so Add is safe here
			go h.dial(m, slices.Clone(m.addrs))
		}
		if roster != nil && !h.closed {
			h.rostering = true
			h.wg.Add(1)
			go h.askRoster(roster)
		}
		h.mu.Unlock()
		// Kept members' connections are never trimmed by the connection
		// manager; outside the lock, which the manager's calls do not need.
		for _, id := range protect {
			cm.Protect(id, protectTag)
		}
		for _, id := range unprotect {
			cm.Unprotect(id, protectTag)
		}
		for _, t := range trim {
			h.trim(t)
		}
		for _, m := range forgotten {
			if m.kept {
				cm.Unprotect(m.id, protectTag)
			}
			h.host.Peerstore().RemovePeer(m.id)
			h.stats.forgotten.Add(1)
			h.log.Info("p2p: member forgotten, unheard for long", "peer", m.id, "node", m.node, "name", m.name,
				"unheard", now.Sub(m.heard).Round(time.Second))
		}
		if len(forgotten) > 0 {
			h.poke() // the ring changed: its new fingers are dialed now
		}
	}
}

// forgets reports whether maintain forgets m, a member not connected now
// (Config.ForgetAfter): neither configured nor kept by the runtime,
// unheard for long, and nothing of the host using it. h.mu held.
func (h *Host) forgets(node wire.NodeID, m *member, now time.Time) bool {
	return h.forget >= 0 && !h.configured[node] && !h.wanted[node] && !m.writing && !m.dialing && m.querying == 0 &&
		now.Sub(m.heard) > h.forget
}

// askRoster asks m for the members it knows (fetchRoster); another kept
// peer is asked at a later pass when m does not answer.
func (h *Host) askRoster(m *member) {
	defer h.wg.Done()
	ok := h.fetchRoster(m)
	h.mu.Lock()
	h.rostering, h.rostered = false, ok
	h.mu.Unlock()
	if ok {
		h.poke() // the ring may have changed
	}
}

// trimmed is a member whose unused connections maintain closes: what it
// needs of the member, copied under the lock.
type trimmed struct {
	id   peer.ID
	name string
}

// trim closes the connections to m that this host dialed. One the peer
// dialed is the peer's to keep or close (it may keep this host as a
// gossip peer); when both ends dialed at once, each closes its own.
func (h *Host) trim(m trimmed) {
	for _, c := range h.host.Network().ConnsToPeer(m.id) {
		if c.Stat().Direction == network.DirOutbound {
			h.log.Debug("p2p: unused connection closed", "peer", m.id, "name", m.name)
			_ = c.Close()
		}
	}
}

func (h *Host) dial(m *member, addrs []ma.Multiaddr) {
	defer h.wg.Done()
	h.stats.dials.Add(1) // counted before it may succeed, so it is never seen late
	ctx, cancel := context.WithTimeout(h.ctx, dialTimeout)
	err := h.host.Connect(ctx, peer.AddrInfo{ID: m.id, Addrs: addrs})
	cancel()
	h.mu.Lock()
	m.dialing = false
	failures, down, name := m.failures, m.downSince, m.name
	if err != nil {
		m.nextDial = time.Now().Add(m.backoff.next())
		if m.failures == 0 {
			m.downSince = time.Now()
		}
		m.failures++
	} else {
		m.backoff.reset()
		m.failures = 0
	}
	h.mu.Unlock()
	if err == nil {
		if failures > 0 {
			h.log.Info("p2p: peer reachable again", "peer", m.id, "name", name, "down", time.Since(down).Round(time.Millisecond))
		}
		return
	}
	h.stats.dialFailures.Add(1)
	if h.ctx.Err() != nil {
		return
	}
	// Said at the 1st, 2nd, 4th, 8th... failure in a row: an operator
	// hears of a peer that is away at once, and of one that stays away
	// less and less often, not at every redial.
	if failures++; failures&(failures-1) == 0 {
		h.log.Warn("p2p: peer unreachable", "peer", m.id, "name", name, "failures", failures,
			"since", time.Since(cmp.Or(down, time.Now())).Round(time.Millisecond), "err", err)
	} else {
		h.log.Debug("p2p: dial failed", "peer", m.id, "failures", failures, "err", err)
	}
}

// allowGater admits only the peers of the allow-list, both ways.
type allowGater struct{ allow map[peer.ID]struct{} }

func (g allowGater) ok(p peer.ID) bool { _, ok := g.allow[p]; return ok }

func (g allowGater) InterceptPeerDial(p peer.ID) bool                 { return g.ok(p) }
func (g allowGater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return g.ok(p) }
func (g allowGater) InterceptAccept(network.ConnMultiaddrs) bool      { return true }
func (g allowGater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return g.ok(p)
}
func (g allowGater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) {
	return true, 0
}

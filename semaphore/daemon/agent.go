package daemon

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/semaphore"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/p2p"
	"github.com/sluicehq/sluice/semaphore/api"
)

// ErrConfig marks a bad agent configuration.
var ErrConfig = errors.New("daemon: bad config")

// AgentConfig configures an agent: one node with its mesh, store and API.
type AgentConfig struct {
	// Name is the node's human name (default: the host name).
	Name string
	// DataDir holds the identity key and the Badger files. Required unless
	// InMemory, which keeps everything in memory (dev and tests) and makes
	// a new identity at every start (unless Key or KeyFile gives one): a
	// voter that forgot its votes must not come back under its old
	// identity. The two exclude each other.
	DataDir  string
	InMemory bool
	// Listen are libp2p multiaddrs (default /ip4/127.0.0.1/tcp/0).
	Listen []string
	// Peers are multiaddrs with /p2p/<id> of other nodes.
	Peers []string
	// InitialMembers are the peer ids of the cluster's first members
	// (like etcd's --initial-cluster), this node's own among them: read on
	// the first start only, checked against the store after. Join starts
	// a node that joins a running cluster as a non-member instead. With
	// neither, a node without Peers bootstraps a cluster of itself; a
	// node with Peers is refused (ErrConfig): it could decide alone.
	// InitialMembers of the one word InitialFromPeers ("peers") names
	// this node and the nodes of Peers, so the ids are given once: every
	// first member must then list all the others in its Peers (a member
	// whose list differs is of another cluster, and never serves with
	// them).
	InitialMembers []string
	Join           bool
	// ClusterSize, when set, must equal the number of InitialMembers.
	ClusterSize int
	// ElectionTimeout is how long an election round may run at first
	// (default 1s); a round that runs out gives the next one twice as long.
	ElectionTimeout time.Duration
	// Key, when set, is the node's identity (tests and dev; with DataDir
	// the key in it rules).
	Key p2p.PrivKey
	// KeyFile, with InMemory only, is an identity key file as `sluice id
	// --data DIR` writes it (DIR/identity.key): the node keeps that
	// identity and everything else in memory, so a cluster of in-memory
	// nodes can be bootstrapped with InitialMembers known beforehand
	// (benchmarks). Restarted with the same key while the other members
	// run, the node comes back with its first incarnation again, under a
	// new nonce: they refuse its check-in (stale life), as they refuse a
	// lost disk.
	KeyFile string
	// Priority 1..14, or election.Off; 0 means election.DefaultPriority.
	Priority uint8
	// PSK is the cluster secret (32 bytes), nil for none.
	PSK []byte
	// HTTPListen is the operator's listener, IP:port ("": none): read-only
	// /metrics, /healthz, /readyz and a live page. Off loopback it needs
	// HTTPToken or HTTPAllow.
	HTTPListen string
	HTTPToken  string
	HTTPAllow  []netip.Prefix
	// APIMode is the API socket's permission bits (0: 0600); APIGroup its
	// group ("": the agent's). See ShareSocket.
	APIMode  os.FileMode
	APIGroup string
	// Insecure allows a Listen address other machines can reach without a
	// PSK (a trusted, closed network); otherwise such a config is refused.
	Insecure bool
	// AllowList: peer ids that may connect; empty admits any with the PSK.
	AllowList []string
	// API is where the local API listens: a Unix socket path, or a
	// loopback host:port (then APIToken is required). Empty: no API.
	API      string
	APIToken string
	// Tick is the core's tick (default DefaultTick).
	Tick time.Duration
	// ShareLease and ShareLinger: see NodeConfig (read-lease aggregation;
	// a negative ShareLease turns it off).
	ShareLease, ShareLinger time.Duration
	// HoldCodec, when set, is the newest codec the agent offers the
	// cluster's level (NodeConfig.Codec): while any member holds it, the
	// cluster's codec stays at most there, and the release before can
	// still take over this agent's store. semaphore.MinCodec to
	// semaphore.Codec; zero: no hold.
	HoldCodec uint64
	// NestedNames makes names nest like URLs and paths (NodeConfig).
	NestedNames bool
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Broken: see NodeConfig.Broken. Never set it outside tests.
	Broken core.Mutant
	// Roles say who may do what on the API (AccessConfig.Roles, the
	// --role settings). Whatever they say, the agent's own user and root
	// are operators, the --api-group's members not named are frontends,
	// and so is every local user on a socket of mode 0666; APIToken is an
	// operator's.
	Roles []string
}

// Agent is a running node: mesh, store, state machines and API.
type Agent struct {
	host  *p2p.Host
	store *store.Store
	// commitSeconds is the store's commit histogram, made before the
	// store opens and registered with the node's series.
	commitSeconds prometheus.Histogram
	node          *Node
	server        *http.Server
	lis           net.Listener
	apiURL        string
	// operator is the operator's listener (--http-listen), nil when off.
	operator     *http.Server
	operatorAddr string
	cancel       context.CancelFunc
	// loopDone closes when the node's loop returned; wg counts the API server.
	loopDone chan struct{}
	wg       sync.WaitGroup
	log      *slog.Logger
	once     sync.Once
}

// StartAgent opens the store, joins the mesh, starts the node's loop and
// serves the API. ctx bounds the start only.
func StartAgent(ctx context.Context, cfg AgentConfig) (_ *Agent, err error) {
	if cfg, err = checkAgentConfig(cfg); err != nil {
		return nil, err
	}
	allow, err := p2p.ParsePeerIDs(cfg.AllowList)
	if err != nil {
		return nil, fmt.Errorf("%w: allow-list: %w", ErrConfig, err)
	}
	peers, err := checkAddrs(cfg)
	if err != nil {
		return nil, err
	}
	a := &Agent{log: cfg.Logger}
	defer func() {
		if err != nil {
			a.closeAll()
		}
	}()

	key, fresh, err := identity(cfg)
	if err != nil {
		return nil, err
	}
	state, boot, err := a.openStore(ctx, cfg, key, fresh)
	if err != nil {
		return nil, err
	}
	host, err := p2p.New(ctx, p2p.Config{Key: key, Listen: cfg.Listen, Peers: cfg.Peers, PSK: cfg.PSK,
		AllowList: allow, Logger: cfg.Logger, Name: cfg.Name, Version: semaphore.Version})
	if err != nil {
		return nil, err
	}
	a.host = host
	if err := a.startNode(cfg, state, boot, peers); err != nil {
		return nil, err
	}
	// Any agent's cluster-wide view asks the leaders for their tables.
	a.host.HandleQueries(a.node.answerTableQuery)
	a.registerMetrics()
	if cfg.API != "" {
		if err := a.serveAPI(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.HTTPListen != "" {
		if err := a.serveOperator(cfg); err != nil {
			return nil, err
		}
	}
	a.log.Info("agent started", "node", uint64(host.Self()), "peer", host.PeerID().String(), "addrs", host.Addrs(),
		"incarnation", state.Incarnation, "api", a.apiURL)
	return a, nil
}

// checkAgentConfig refuses flags that contradict each other and fills in
// the defaults (logger, priority, name).
func checkAgentConfig(cfg AgentConfig) (AgentConfig, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ClusterSize < 0 || cfg.ClusterSize > wire.MaxMembers {
		return cfg, fmt.Errorf("%w: cluster size %d is not 1..%d", ErrConfig, cfg.ClusterSize, wire.MaxMembers)
	}
	if _, _, err := socketAccess(cfg.APIMode, cfg.APIGroup); err != nil {
		return cfg, err
	}
	if _, err := cfg.access(); err != nil {
		return cfg, err
	}
	if cfg.HTTPListen != "" {
		if err := CheckOperatorListen(cfg.HTTPListen, cfg.HTTPToken, cfg.HTTPAllow); err != nil {
			return cfg, err
		}
	}
	if a := p2p.ReachableListen(cfg.Listen); a != "" && cfg.PSK == nil && !cfg.Insecure {
		return cfg, fmt.Errorf("%w: listening on %s, which other machines can reach, without a cluster secret: "+
			"anyone who can connect could join the mesh and vote; give --psk-file, listen on loopback only, "+
			"or say --insecure (a trusted, closed network)", ErrConfig, a)
	}
	if cfg.InMemory && cfg.DataDir != "" {
		return cfg, fmt.Errorf("%w: --in-memory keeps no state, so with --data it would bring a persisted identity back "+
			"without its votes and lock table; use --data alone, or --in-memory alone (a new identity at every start)", ErrConfig)
	}
	if cfg.KeyFile != "" && !cfg.InMemory {
		return cfg, fmt.Errorf("%w: --key-file is for --in-memory; with --data the identity is the data directory's key", ErrConfig)
	}
	if cfg.KeyFile != "" && cfg.Key != nil {
		return cfg, fmt.Errorf("%w: both a key and a key file given", ErrConfig)
	}
	if cfg.Join && len(cfg.InitialMembers) > 0 {
		return cfg, fmt.Errorf("%w: --join and --initial-members exclude each other: members bootstrap a cluster, others join it", ErrConfig)
	}
	if cfg.ElectionTimeout < 0 {
		return cfg, fmt.Errorf("%w: negative election timeout", ErrConfig)
	}
	if h := cfg.HoldCodec; h != 0 && (h < uint64(wire.MinVersion) || h > uint64(wire.Version)) {
		return cfg, fmt.Errorf("%w: --hold-codec %d: this release reads codecs %d to %d", ErrConfig, h, wire.MinVersion, wire.Version)
	}
	if cfg.Priority == 0 {
		cfg.Priority = election.DefaultPriority
	}
	if cfg.DataDir == "" && !cfg.InMemory {
		return cfg, fmt.Errorf("%w: a data directory is needed (or in-memory mode)", ErrConfig)
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
		if cfg.Name == "" {
			cfg.Name = "sluice"
		}
	}
	if strings.Contains(cfg.Name, "|") {
		return cfg, fmt.Errorf("%w: node name %q contains '|'", ErrConfig, cfg.Name)
	}
	return cfg, nil
}

// checkAddrs returns the node ids of the configured peers, and checks the
// listen and API addresses.
func checkAddrs(cfg AgentConfig) ([]wire.NodeID, error) {
	peers, err := p2p.NodeIDsOf(cfg.Peers)
	if err != nil {
		return nil, fmt.Errorf("%w: peers: %w", ErrConfig, err)
	}
	if err := p2p.CheckListen(cfg.Listen); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.API != "" {
		if err := checkAPI(cfg.API, cfg.APIToken); err != nil {
			return nil, err
		}
	}
	return peers, nil
}

// openStore opens the store of the node with key (fresh: an identity that
// never served) and returns what it holds with the members the election
// bootstraps with (see bootMembers).
func (a *Agent) openStore(ctx context.Context, cfg AgentConfig, key p2p.PrivKey, fresh bool) (store.State, []wire.NodeID, error) {
	pid, err := p2p.PeerIDOf(key)
	if err != nil {
		return store.State{}, nil, err
	}
	self := p2p.NodeIDOf(pid)
	boot, err := bootstrap(cfg, self)
	if err != nil {
		return store.State{}, nil, err
	}
	if fresh && len(boot) > 0 && !slices.Contains(boot, self) {
		// A fresh identity has no cluster in its store yet: say so before
		// opening it.
		return store.State{}, nil, notListed(pid)
	}
	a.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_store_commit_seconds",
		Help:    "Time the store took to make a transaction durable (Badger's write and its fsync; no fsync in memory).",
		Buckets: commitBuckets})
	st, state, err := store.Open(ctx, store.Config{Dir: cfg.DataDir, InMemory: cfg.InMemory, Logger: cfg.Logger,
		Identity: uint64(self), Fresh: fresh, ObserveCommit: func(d time.Duration) { a.commitSeconds.Observe(d.Seconds()) }})
	if err != nil {
		return store.State{}, nil, err
	}
	a.store = st
	if fresh && cfg.DataDir != "" {
		// The store now records this identity: from here on, an empty
		// store beside this key means a lost disk.
		if err := p2p.MarkIdentityUsed(cfg.DataDir); err != nil {
			return store.State{}, nil, err
		}
	}
	boot, err = bootMembers(cfg, state, boot, self, pid)
	return state, boot, err
}

// bootMembers are the members the election bootstraps with: boot (from
// --initial-members, this node among them) or this node alone on a first
// start; none when joining, or once the store knows its cluster.
func bootMembers(cfg AgentConfig, state store.State, boot []wire.NodeID, self wire.NodeID, pid fmt.Stringer) ([]wire.NodeID, error) {
	if e := state.Election; e != nil && e.Cluster != 0 {
		// The store rules after the first start: the flags may stay in a
		// unit file, but they must describe this cluster.
		if len(boot) > 0 && election.ClusterID(boot) != e.Cluster {
			return nil, fmt.Errorf("%w: this data directory belongs to cluster %016x, --initial-members describe cluster %016x",
				ErrConfig, e.Cluster, election.ClusterID(boot))
		}
		return nil, nil
	}
	switch {
	case len(boot) > 0 && !slices.Contains(boot, self):
		return nil, notListed(pid)
	case len(boot) > 0 || cfg.Join:
		return boot, nil
	case len(cfg.Peers) > 0:
		return nil, fmt.Errorf("%w: this node has --peers but no cluster to belong to: give the first members' peer ids "+
			"with --initial-members on each of them (`sluice id --data DIR` prints one), or --join to join a running "+
			"cluster as a non-member; a node that bootstrapped alone would grant locks the others also grant", ErrConfig)
	case cfg.ClusterSize > 1:
		return nil, fmt.Errorf("%w: --cluster-size %d alone cannot bootstrap safely: list the members with --initial-members",
			ErrConfig, cfg.ClusterSize)
	default:
		return []wire.NodeID{self}, nil // a cluster of one
	}
}

// startNode starts the node on a.host and a.store, and its loop.
func (a *Agent) startNode(cfg AgentConfig, state store.State, boot, peers []wire.NodeID) error {
	addr := "p2p"
	if as := a.host.Addrs(); len(as) > 0 {
		addr = as[0]
	}
	id := election.ID{Priority: cfg.Priority, Random: rand.Uint32(), Address: addr,
		PID: uint32(os.Getpid()), Name: cfg.Name}
	tick := cmp.Or(cfg.Tick, DefaultTick)
	node, err := NewNode(NodeConfig{Self: a.host.Self(), Bootstrap: boot, Nonce: nonce(), Peers: peers, ID: id,
		ElectionTicks: int64(cfg.ElectionTimeout / tick),
		State:         state, Transport: a.host, Store: a.store, Tick: cfg.Tick, ShareLease: cfg.ShareLease, ShareLinger: cfg.ShareLinger, Codec: cfg.HoldCodec, NestedNames: cfg.NestedNames,
		Logger: cfg.Logger, Broken: cfg.Broken, Cluster: a.host})
	if err != nil {
		return err
	}
	a.node = node
	loopCtx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.loopDone = make(chan struct{})
	go func() {
		defer close(a.loopDone)
		if err := node.Run(loopCtx); err != nil {
			a.log.Error("node loop", "err", err)
		}
	}()
	return nil
}

// identity is the node's key: kept in the data directory, given, read
// from the key file, or new. fresh says that it never served (made now, or
// by `sluice id`); a key beside an in-memory store always starts afresh.
func identity(cfg AgentConfig) (p2p.PrivKey, bool, error) {
	switch {
	case cfg.DataDir != "":
		return p2p.LoadOrCreateIdentity(cfg.DataDir)
	case cfg.Key != nil:
		return cfg.Key, true, nil
	case cfg.KeyFile != "":
		k, err := readKeyFile(cfg.KeyFile)
		return k, true, err
	}
	k, err := p2p.NewIdentity()
	return k, true, err
}

// readKeyFile reads an existing identity key file. The p2p package reads
// keys only as a data directory's identity.key (and makes one when it is
// missing), so the file must have that name, and a missing file is an
// error here rather than a new key: a typo must not start a stranger.
func readKeyFile(path string) (p2p.PrivKey, error) {
	if filepath.Base(path) != p2p.IdentityFile {
		return nil, fmt.Errorf("%w: --key-file %s: the file must be named %s, as `sluice id --data DIR` writes it",
			ErrConfig, path, p2p.IdentityFile)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: --key-file: %w (make one with `sluice id --data DIR`)", ErrConfig, err)
	}
	k, _, err := p2p.LoadOrCreateIdentity(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%w: --key-file: %w", ErrConfig, err)
	}
	return k, nil
}

// InitialFromPeers, as the one InitialMembers, names this node and the
// nodes of Peers.
const InitialFromPeers = "peers"

// bootstrap reads the initial members: peer ids, this node's among them.
func bootstrap(cfg AgentConfig, self wire.NodeID) ([]wire.NodeID, error) {
	if len(cfg.InitialMembers) == 0 {
		return nil, nil
	}
	var ids []wire.NodeID
	if len(cfg.InitialMembers) == 1 && cfg.InitialMembers[0] == InitialFromPeers {
		if len(cfg.Peers) == 0 {
			return nil, fmt.Errorf("%w: --initial-members peers takes the members from --peers, and there are none", ErrConfig)
		}
		peers, err := p2p.NodeIDsOf(cfg.Peers)
		if err != nil {
			return nil, fmt.Errorf("%w: --peers: %w", ErrConfig, err)
		}
		ids = append([]wire.NodeID{self}, peers...)
	} else {
		pids, err := p2p.ParsePeerIDs(cfg.InitialMembers)
		if err != nil {
			return nil, fmt.Errorf("%w: --initial-members: %w (peer ids, or the one word %q)", ErrConfig, err, InitialFromPeers)
		}
		for _, p := range pids {
			ids = append(ids, p2p.NodeIDOf(p))
		}
	}
	var boot []wire.NodeID
	for _, id := range ids {
		if !slices.Contains(boot, id) {
			boot = append(boot, id)
		}
	}
	switch {
	case cfg.ClusterSize > 0 && cfg.ClusterSize != len(boot):
		return nil, fmt.Errorf("%w: --cluster-size %d, but --initial-members lists %d members", ErrConfig, cfg.ClusterSize, len(boot))
	case len(boot) > wire.MaxMembers:
		return nil, fmt.Errorf("%w: %d initial members, at most %d", ErrConfig, len(boot), wire.MaxMembers)
	}
	return boot, nil
}

func notListed(pid fmt.Stringer) error {
	return fmt.Errorf("%w: --initial-members must list this node's own peer id %s too (it is a first member), "+
		"or use --join to join a running cluster as a non-member", ErrConfig, pid)
}

// nonce draws the random half of this life's name.
func nonce() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand's contract)
	return binary.LittleEndian.Uint64(b[:])
}

// access is who may do what on the API (see Roles).
func (cfg AgentConfig) access() (*Access, error) {
	return NewAccess(AccessConfig{Roles: cfg.Roles, Group: cfg.APIGroup, Open: cfg.APIMode&0o006 != 0, Token: cfg.APIToken})
}

func (a *Agent) serveAPI(cfg AgentConfig) error {
	access, err := cfg.access()
	if err != nil {
		return err
	}
	lis, url, err := ListenAPI(cfg.API, cfg.APIToken)
	if err != nil {
		return err
	}
	if !api.IsTCPAddr(url) {
		if err := ShareSocket(url, cfg.APIMode, cfg.APIGroup); err != nil {
			_ = lis.Close()
			return err
		}
	}
	a.lis, a.apiURL = lis, url
	reg := a.node.Registry()
	handler := NewAPI(APIConfig{Node: a.node, Token: cfg.APIToken, Access: access, Logger: cfg.Logger, Metrics: reg,
		Peers: a.peers, Mesh: a.meshPeers, PeerNode: peerNode, Cluster: a.host})
	a.server = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ConnContext: ConnContext,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	serve := lis
	if !api.IsTCPAddr(url) {
		// The socket also speaks the compact protocol (file permissions
		// guard it, as they guard HTTP there; TCP needs the token).
		mux := newAPIMux(lis, a.node, access)
		serve = mux.HTTP()
		a.wg.Go(func() {
			mux.run()
			mux.wait()
		})
	}
	a.wg.Go(func() {
		if err := a.server.Serve(serve); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("API server", "err", err)
		}
	})
	return nil
}

// commitBuckets are sluice_store_commit_seconds's: 20 µs (in memory) to
// 2 s (a disk that stalls).
var commitBuckets = prometheus.ExponentialBucketsRange(0.00002, 2, 18)

// registerMetrics adds the mesh's, the store's, the node's state and the
// process's series to the node's registry, which the API and the
// operator's listener serve.
func (a *Agent) registerMetrics() {
	reg := a.node.Registry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newStateCollector(a.node),
		buildInfo(),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_peers_connected",
			Help: "Cluster peers this node's mesh is connected to."}, func() float64 {
			n := 0
			for _, m := range a.host.Members() {
				if m.Connected {
					n++
				}
			}
			return float64(n)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_kept_write_locks",
			Help: "Write locks this agent holds for processes that are gone: drains whose job failed or was killed, " +
				"which keep their names drained until undrained."}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			kept, err := a.node.KeptLocks(ctx)
			if err != nil {
				return 0
			}
			return float64(len(kept))
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_peers_known",
			Help: "Cluster peers this node's mesh knows of."}, func() float64 { return float64(len(a.host.Members())) }),
		// Every peer the host holds a connection to, members or not, by
		// who dialed: what a bounded mesh keeps small whatever the fleet.
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_p2p_connections",
			Help:        p2pConnsHelp,
			ConstLabels: prometheus.Labels{"direction": "in"}}, func() float64 { in, _ := a.host.Conns(); return float64(in) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_p2p_connections",
			Help:        p2pConnsHelp,
			ConstLabels: prometheus.Labels{"direction": "out"}}, func() float64 { _, out := a.host.Conns(); return float64(out) }),
		// Frames from peers that the mesh refused.
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_mesh_frames_rejected_total",
			Help:        frameRejectedHelp,
			ConstLabels: prometheus.Labels{"reason": "malformed"}}, func() float64 { return float64(a.host.Stats().Malformed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_mesh_frames_rejected_total",
			Help:        frameRejectedHelp,
			ConstLabels: prometheus.Labels{"reason": "oversized"}}, func() float64 { return float64(a.host.Stats().Oversized) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_mesh_frames_rejected_total",
			Help:        frameRejectedHelp,
			ConstLabels: prometheus.Labels{"reason": "other_release"}}, func() float64 { return float64(a.host.Stats().Refused) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_mesh_writes_total",
			Help: "Writes of messages to other agents' streams (a loop turn's messages to one agent go in one)."},
			func() float64 { return float64(a.host.Stats().Writes) }),
		a.commitSeconds,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_syncs_total",
			Help: "Store transactions made durable (one fsync each on disk)."}, func() float64 { return float64(a.store.Stats().Syncs) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_failures_total",
			Help: "Store batches that failed."}, func() float64 { return float64(a.store.Stats().Failures) }),
	)
}

// ListenAPI listens on addr: a Unix socket path (a stale socket file left
// by a dead agent is replaced; a live one is an error) or a loopback
// host:port, which needs a token. It returns the listener and the address
// as clients write it.
func ListenAPI(addr, token string) (net.Listener, string, error) {
	if err := checkAPI(addr, token); err != nil {
		return nil, "", err
	}
	if api.IsTCPAddr(addr) {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, "", fmt.Errorf("daemon: API listen: %w", err)
		}
		return lis, lis.Addr().String(), nil
	}
	if err := os.MkdirAll(filepath.Dir(addr), 0o711); err != nil {
		return nil, "", fmt.Errorf("daemon: API socket directory: %w", err)
	}
	if _, err := os.Stat(addr); err == nil {
		if c, err := net.DialTimeout("unix", addr, time.Second); err == nil {
			_ = c.Close()
			return nil, "", fmt.Errorf("%w: another agent serves %s", ErrConfig, addr)
		}
		_ = os.Remove(addr) // stale: its agent is gone
	}
	lis, err := net.Listen("unix", addr)
	if err != nil {
		return nil, "", fmt.Errorf("daemon: API listen on %s: %w", addr, err)
	}
	_ = os.Chmod(addr, 0o600)
	return lis, addr, nil
}

// ShareSocket sets the API socket's permissions to mode (0: 0600) and
// its group to group ("": the agent's), so that frontends running as other
// users of that group (www-data, php-fpm) can use it. mode holds only read
// and write bits, the owner's among them. A directory ListenAPI makes for
// the socket is 0711 (search only: the socket's mode decides who may
// connect); one it found is left as it is (a systemd RuntimeDirectory).
func ShareSocket(path string, mode os.FileMode, group string) error {
	mode, gid, err := socketAccess(mode, group)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("%w: API socket mode: %w", ErrConfig, err)
	}
	if gid >= 0 {
		if err := os.Lchown(path, -1, gid); err != nil {
			return fmt.Errorf("%w: --api-group %s: %w (the agent must be root or in that group)", ErrConfig, group, err)
		}
	}
	return nil
}

// socketAccess checks an API socket's mode (0: 0600) and looks its group
// up (-1: none given).
func socketAccess(mode os.FileMode, group string) (os.FileMode, int, error) {
	if mode == 0 {
		mode = 0o600
	}
	if mode&^0o666 != 0 || mode&0o600 != 0o600 {
		return 0, 0, fmt.Errorf("%w: API socket mode %04o: read and write bits only, the owner's among them (0600, 0660, 0666)", ErrConfig, mode)
	}
	if group == "" {
		return mode, -1, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: --api-group: %w", ErrConfig, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: --api-group %s: gid %q", ErrConfig, group, g.Gid)
	}
	return mode, gid, nil
}

// checkAPI refuses API addresses that must not be served: TCP beyond
// loopback, or without a token.
func checkAPI(addr, token string) error {
	if !api.IsTCPAddr(addr) {
		return nil
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("%w: API address %q: %v", ErrConfig, addr, err)
	}
	if !ap.Addr().IsLoopback() {
		return fmt.Errorf("%w: API address %s is not a loopback address", ErrConfig, addr)
	}
	if token == "" {
		return fmt.Errorf("%w: a TCP API address needs a bearer token", ErrConfig)
	}
	return nil
}

// Node is the agent's node, for in-process use.
func (a *Agent) Node() *Node { return a.node }

// Host is the agent's mesh host.
func (a *Agent) Host() *p2p.Host { return a.host }

// APIAddr is where the API listens ("" without one).
func (a *Agent) APIAddr() string { return a.apiURL }

// Stop shuts the agent down: first the node lets its shared read tickets
// go (Node.StopSharing, at most a second), so that a writer does not wait
// for their lease to run out; then the loop, so that waiting clients get
// an answer (not_ready), then the API (graceful within ctx), the mesh and
// the store.
func (a *Agent) Stop(ctx context.Context) error {
	var err error
	a.once.Do(func() {
		if a.node != nil && a.cancel != nil {
			if e := a.node.StopSharing(ctx); e != nil {
				a.log.Warn("stopping with shared read tickets the leaders may keep until their lease ends", "err", e)
			}
		}
		a.stopLoop()
		if a.server != nil {
			if e := a.server.Shutdown(ctx); e != nil {
				_ = a.server.Close()
			}
		}
		err = a.closeAll()
	})
	return err
}

func (a *Agent) stopLoop() {
	if a.cancel != nil {
		a.cancel()
		<-a.loopDone
	}
}

func (a *Agent) closeAll() error {
	a.stopLoop()
	if a.server != nil {
		_ = a.server.Close()
	}
	if a.operator != nil {
		_ = a.operator.Close()
	}
	a.wg.Wait()
	var errs []error
	if a.host != nil {
		errs = append(errs, a.host.Close())
	}
	if a.store != nil {
		errs = append(errs, a.store.Close())
	}
	return errors.Join(errs...)
}

// peers are the other peers of the mesh, as the API shows them.
func (a *Agent) peers() []api.MeshPeer {
	out := []api.MeshPeer{}
	for _, m := range a.host.Members() {
		out = append(out, api.MeshPeer{Node: nodeID(m.Node), Peer: m.Peer.String(), Name: m.Name, Addrs: m.Addrs, Connected: m.Connected,
			Version: m.Version, Codec: int(m.Codec)})
	}
	return out
}

// meshPeers are the peers of the mesh, this node among them.
func (a *Agent) meshPeers() []api.MeshPeer {
	return append(a.peers(), api.MeshPeer{Node: nodeID(a.host.Self()), Peer: a.host.PeerID().String(), Addrs: a.host.Addrs(),
		Version: semaphore.Version, Codec: int(wire.Version)})
}

func peerNode(s string) (wire.NodeID, error) {
	pids, err := p2p.ParsePeerIDs([]string{s})
	if err != nil {
		return 0, err
	}
	return p2p.NodeIDOf(pids[0]), nil
}

// buildInfo is sluice_build_info from the binary's own build record.
func buildInfo() prometheus.Collector {
	version, revision := "unknown", ""
	goVersion := runtime.Version()
	if info, ok := debug.ReadBuildInfo(); ok {
		version = cmp.Or(info.Main.Version, "(devel)")
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	return buildInfoGauge(version, revision, goVersion)
}

// p2pConnsHelp is the help of sluice_p2p_connections.
const p2pConnsHelp = "Peers this node's mesh holds a connection to, cluster members or not, " +
	"by who dialed the first (in: the peer, out: this node)."

// frameRejectedHelp is the help of sluice_mesh_frames_rejected_total, the
// same for each reason, as Prometheus requires.
const frameRejectedHelp = "Frames from peers refused by the mesh, by reason: malformed and oversized reset their stream; " +
	"other_release (a codec, kind or must-understand field of a release this one does not read) is dropped alone."

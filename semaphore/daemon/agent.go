package daemon

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/semaphore/api"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/p2p"
)

// ErrConfig marks a bad agent configuration.
var ErrConfig = errors.New("daemon: bad config")

// AgentConfig configures an agent: one node with its mesh, store and API.
type AgentConfig struct {
	// Name is the node's human name (default: the host name).
	Name string
	// DataDir holds the identity key and the Badger files. Required unless
	// InMemory, which keeps the lock table in memory (dev and tests); with
	// InMemory and no DataDir the identity is new at every start.
	DataDir  string
	InMemory bool
	// Listen are libp2p multiaddrs (default /ip4/127.0.0.1/tcp/0).
	Listen []string
	// Peers are multiaddrs with /p2p/<id> of other nodes.
	Peers []string
	// ClusterSize is the configured number of nodes (default 1).
	ClusterSize int
	// Priority 1..14, or election.Off; 0 means election.DefaultPriority.
	Priority uint8
	// PSK is the cluster secret (32 bytes), nil for none.
	PSK []byte
	// AllowList: peer ids that may connect; empty admits any with the PSK.
	AllowList []string
	// API is where the local API listens: a Unix socket path, or a
	// loopback host:port (then APIToken is required). Empty: no API.
	API      string
	APIToken string
	// Tick is the core's tick (default DefaultTick).
	Tick time.Duration
	// Logger defaults to discarding.
	Logger *slog.Logger
}

// Agent is a running node: mesh, store, state machines and API.
type Agent struct {
	host   *p2p.Host
	store  *store.Store
	node   *Node
	server *http.Server
	lis    net.Listener
	apiURL string
	cancel context.CancelFunc
	// loopDone closes when the node's loop returned; wg counts the API server.
	loopDone chan struct{}
	wg       sync.WaitGroup
	log      *slog.Logger
	once     sync.Once
}

// StartAgent opens the store, joins the mesh, starts the node's loop and
// serves the API. ctx bounds the start only.
func StartAgent(ctx context.Context, cfg AgentConfig) (_ *Agent, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ClusterSize == 0 {
		cfg.ClusterSize = 1
	}
	if cfg.ClusterSize < 1 || cfg.ClusterSize > 1000 {
		return nil, fmt.Errorf("%w: cluster size %d is not 1..1000", ErrConfig, cfg.ClusterSize)
	}
	if cfg.Priority == 0 {
		cfg.Priority = election.DefaultPriority
	}
	if cfg.DataDir == "" && !cfg.InMemory {
		return nil, fmt.Errorf("%w: a data directory is needed (or in-memory mode)", ErrConfig)
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
		if cfg.Name == "" {
			cfg.Name = "sluice"
		}
	}
	if strings.Contains(cfg.Name, "|") {
		return nil, fmt.Errorf("%w: node name %q contains '|'", ErrConfig, cfg.Name)
	}
	allow, err := p2p.ParsePeerIDs(cfg.AllowList)
	if err != nil {
		return nil, fmt.Errorf("%w: allow-list: %w", ErrConfig, err)
	}
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
	a := &Agent{log: cfg.Logger}
	defer func() {
		if err != nil {
			a.closeAll()
		}
	}()

	key, err := identity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	st, state, err := store.Open(ctx, store.Config{Dir: cfg.DataDir, InMemory: cfg.InMemory, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	a.store = st
	host, err := p2p.New(ctx, p2p.Config{Key: key, Listen: cfg.Listen, Peers: cfg.Peers, PSK: cfg.PSK,
		AllowList: allow, Logger: cfg.Logger, Name: cfg.Name})
	if err != nil {
		return nil, err
	}
	a.host = host
	addr := "p2p"
	if as := host.Addrs(); len(as) > 0 {
		addr = as[0]
	}
	id := election.ID{Priority: cfg.Priority, Random: rand.Uint32(), Address: addr,
		PID: uint32(os.Getpid()), Name: cfg.Name}
	node, err := NewNode(NodeConfig{Self: host.Self(), ClusterSize: cfg.ClusterSize, Peers: peers, ID: id,
		State: state, Transport: host, Store: st, Tick: cfg.Tick, Logger: cfg.Logger})
	if err != nil {
		return nil, err
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
	if cfg.API != "" {
		if err := a.serveAPI(cfg); err != nil {
			return nil, err
		}
	}
	a.log.Info("agent started", "node", uint64(host.Self()), "peer", host.PeerID().String(), "addrs", host.Addrs(),
		"incarnation", state.Incarnation, "api", a.apiURL)
	return a, nil
}

// identity is the node's key: kept in dataDir, or new for a node without one.
func identity(dataDir string) (p2p.PrivKey, error) {
	if dataDir == "" {
		return p2p.NewIdentity()
	}
	return p2p.LoadOrCreateIdentity(dataDir)
}

func (a *Agent) serveAPI(cfg AgentConfig) error {
	lis, url, err := ListenAPI(cfg.API, cfg.APIToken)
	if err != nil {
		return err
	}
	a.lis, a.apiURL = lis, url
	reg := a.node.Registry()
	reg.MustRegister(
		collectors.NewGoCollector(),
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
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_peers_known",
			Help: "Cluster peers this node's mesh knows of."}, func() float64 { return float64(len(a.host.Members())) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_syncs_total",
			Help: "Store transactions made durable (one fsync each on disk)."}, func() float64 { return float64(a.store.Stats().Syncs) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_failures_total",
			Help: "Store batches that failed."}, func() float64 { return float64(a.store.Stats().Failures) }),
	)
	handler := NewAPI(APIConfig{Node: a.node, Token: cfg.APIToken, Logger: cfg.Logger, Metrics: reg,
		Extra: func() any { return a.host.Members() }})
	a.server = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	a.wg.Go(func() {
		if err := a.server.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("API server", "err", err)
		}
	})
	return nil
}

// ListenAPI listens on addr: a Unix socket path (a stale socket file left
// by a dead agent is replaced; a live one is an error) or a loopback
// host:port, which needs a token. It returns the listener and the address
// as clients write it.
func ListenAPI(addr, token string) (net.Listener, string, error) {
	if err := checkAPI(addr, token); err != nil {
		return nil, "", err
	}
	if IsTCPAddr(addr) {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, "", fmt.Errorf("daemon: API listen: %w", err)
		}
		return lis, lis.Addr().String(), nil
	}
	if err := os.MkdirAll(filepath.Dir(addr), 0o700); err != nil {
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

// checkAPI refuses API addresses that must not be served: TCP beyond
// loopback, or without a token.
func checkAPI(addr, token string) error {
	if !IsTCPAddr(addr) {
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

// Stop shuts the agent down: the loop first, so that waiting clients get
// an answer (not_ready) at once, then the API (graceful within ctx), the
// mesh and the store.
func (a *Agent) Stop(ctx context.Context) error {
	var err error
	a.once.Do(func() {
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

// IsTCPAddr tells a host:port from a socket path.
func IsTCPAddr(addr string) bool { return api.IsTCPAddr(addr) }

// DefaultAPI is the API address shared by agent, dev and every client
// command: one Unix socket per user.
func DefaultAPI() string { return api.DefaultAPI() }

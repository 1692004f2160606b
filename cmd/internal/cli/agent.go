package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/p2p"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// signalContext ends on SIGINT or SIGTERM: the long-running commands shut
// down cleanly on Ctrl-C.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("--log-level %q is not debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// startError maps an agent's start failure to an exit code: a bad
// configuration is a usage error, anything else (a port in use, a corrupt
// data directory) a plain failure.
func startError(err error) error {
	if errors.Is(err, daemon.ErrConfig) {
		return &usageError{err: err}
	}
	return err
}

// agentFlags are the flags of `sluice agent`.
type agentFlags struct {
	name, data, keyFile, priority, pskFile, api, tokenFile, logLevel, config, broken string
	apiMode, apiGroup, httpListen, httpTokenFile                                     string
	httpAllow, roles                                                                 []string
	listen, peers, allow, initial                                                    []string
	size, holdCodec                                                                  int
	memoryTarget                                                                     string
	inMemory, join, insecure, nestedNames                                            bool
	electionTimeout, shareLease, shareLinger                                         time.Duration
	// cpuProfile is the hidden --cpu-profile: the benchmark harness
	// (integration/bench) profiles the agents of a run with it. A heap
	// profile goes beside it (PATH.heap) when the agent is told to stop,
	// before it stops: what it held at the end of the run.
	cpuProfile string
}

func newAgentCmd() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run this machine's node of the cluster",
		Long: "Run this machine's node: it joins the mesh of --peers, takes part in\n" +
			"the election and serves the local API on --api (a Unix socket by\n" +
			"default; a loopback host:port needs --api-token-file).\n\n" +
			"Every flag can also come from the environment (SLUICE_ and the flag's\n" +
			"name: SLUICE_CLUSTER_SIZE=5) or from --config FILE (YAML, keys are the\n" +
			"flag names, lists for --peers/--listen/--allow).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applySettings(cmd, f.config); err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), f.logLevel)
			if err != nil {
				return err
			}
			cfg, err := f.agentConfig(log)
			if err != nil {
				return err
			}
			memory, err := f.memoryGovernor(cmd, log)
			if err != nil {
				return err
			}
			stopProfile, err := startCPUProfile(f.cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			heapProfile := ""
			if f.cpuProfile != "" {
				heapProfile = f.cpuProfile + ".heap"
			}
			return runAgent(cmd, cfg, heapProfile, memory)
		},
	}
	f.add(cmd)
	return cmd
}

func (f *agentFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "node name (default: the host name)")
	fl.StringVar(&f.data, "data", "", "data directory: identity key and lock table")
	fl.StringSliceVar(&f.listen, "listen", []string{"/ip4/0.0.0.0/tcp/4001"}, "libp2p listen multiaddrs")
	fl.StringSliceVar(&f.peers, "peers", nil, "other nodes, as multiaddrs ending in /p2p/ID")
	fl.StringSliceVar(&f.initial, "initial-members", nil, "peer ids of the cluster's first members, this node's among them, or \"peers\": this node and every node of --peers (first start only)")
	fl.BoolVar(&f.join, "join", false, "join the running cluster of --peers as a non-member (then: sluice members add ID)")
	fl.IntVar(&f.size, "cluster-size", 0, "number of initial members, as a check of --initial-members (optional)")
	fl.DurationVar(&f.electionTimeout, "election-timeout", time.Second, "how long an election round may run at first; slow links get more")
	fl.DurationVar(&f.shareLease, "share-lease", daemon.DefaultShareLease, "read-lease aggregation: this agent holds one cluster-wide READ_ONLY ticket per name for its local readers, for this long, renewed while they hold it; a node that cannot be reached holds a drain up to this long (0: off, every reader runs the whole bakery)")
	fl.DurationVar(&f.shareLinger, "share-linger", 0, "how long a shared read ticket is kept with no local reader (default: an eighth of --share-lease)")
	fl.BoolVar(&f.nestedNames, "nested-names", false, nestedNamesUsage)
	fl.IntVar(&f.holdCodec, "hold-codec", 0, fmt.Sprintf("offer the cluster at most this codec (%d to %d), so that its codec does not move past what the release before reads and a downgrade stays possible; remove it once every agent runs this release (0: no hold)", semaphore.MinCodec, semaphore.Codec))
	fl.StringVar(&f.priority, "priority", fmt.Sprint(election.DefaultPriority), "election priority 1..14 (1 wins), or off")
	fl.StringVar(&f.pskFile, "psk-file", "", "cluster secret (libp2p swarm key file)")
	fl.StringSliceVar(&f.allow, "allow", nil, "peer ids allowed to connect (default: any with the secret)")
	fl.BoolVar(&f.insecure, "insecure", false, "allow a --listen address other machines can reach without --psk-file (a trusted, closed network only)")
	fl.StringVar(&f.api, "api", api.DefaultAPI(), "local API address: a Unix socket path, or a loopback host:port")
	fl.StringVar(&f.tokenFile, "api-token-file", "", "bearer token for a TCP API address")
	fl.StringVar(&f.httpListen, "http-listen", "", "the operator's read-only HTTP listener, IP:port (/metrics, /healthz, /readyz, a live page); off loopback it needs --http-token-file or --http-allow")
	fl.StringVar(&f.httpTokenFile, "http-token-file", "", "bearer token of --http-listen (Authorization: Bearer, or ?token= for a browser)")
	fl.StringSliceVar(&f.httpAllow, "http-allow", nil, "client networks --http-listen admits, CIDR or IP (e.g. 10.0.0.0/8)")
	fl.StringVar(&f.apiMode, "api-mode", "0600", "permissions of the API socket, octal: 0600 (this user), 0660 (and --api-group), 0666 (every local user)")
	fl.StringVar(&f.apiGroup, "api-group", "", "group of the API socket (e.g. www-data), for frontends running as other users; with --api-mode 0660; its members are frontends unless --role names them")
	fl.StringSliceVar(&f.roles, "role", nil, "who may do what on the API: WHO=ROLE or WHO=ROLE:PREFIX, WHO being user:NAME, group:NAME or token:FILE, ROLE frontend (read-only locks), writer (every mode) or operator (everything); repeat for more (the agent's user and root are operators)")
	fl.BoolVar(&f.inMemory, "in-memory", false, "keep everything in memory, with a new identity at every start (dev and tests)")
	fl.StringVar(&f.keyFile, "key-file", "", "with --in-memory: keep the identity of this key file (DIR/identity.key, made by 'sluice id --data DIR'), so that --initial-members can name the node")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.memoryTarget, "memory-target", defaultMemoryTarget, "memory the agent keeps itself near: Go's soft limit, set to this or to twice the live heap when that is more, so a large lock table is collected about as often as by Go's default (0: off; off too when GOMEMLIMIT is set and this flag is not)")
	addBrokenFlag(cmd, &f.broken)
	fl.StringVar(&f.cpuProfile, "cpu-profile", "", "")
	_ = fl.MarkHidden("cpu-profile")
	fl.StringVar(&f.config, "config", "", "YAML file with any of these settings (keys: the flag names); flags win over SLUICE_* environment variables, which win over the file")
}

// agentConfig checks the flags and turns them into the agent's config,
// reading the secret and the token from their files.
func (f *agentFlags) agentConfig(log *slog.Logger) (daemon.AgentConfig, error) {
	var none daemon.AgentConfig
	if f.data == "" && !f.inMemory {
		return none, usageErrorf("agent: --data DIR is required (or --in-memory)")
	}
	if f.size < 0 {
		return none, usageErrorf("agent: --cluster-size must be at least 1, got %d", f.size)
	}
	if f.electionTimeout < 0 {
		return none, usageErrorf("agent: --election-timeout must not be negative, got %s", f.electionTimeout)
	}
	switch {
	case f.shareLease < 0 || f.shareLease > 0 && f.shareLease < 100*time.Millisecond || f.shareLease > time.Hour:
		return none, usageErrorf("agent: --share-lease must be 0 (off) or between 100ms and 1h, got %s", f.shareLease)
	case f.shareLinger < 0 || f.shareLease > 0 && f.shareLinger >= f.shareLease:
		return none, usageErrorf("agent: --share-linger must be at least 0 and below --share-lease, got %s", f.shareLinger)
	}
	if h := f.holdCodec; h != 0 && (h < semaphore.MinCodec || h > semaphore.Codec) {
		return none, usageErrorf("agent: --hold-codec must be 0 (no hold) or %d to %d, the codecs this release reads; got %d", semaphore.MinCodec, semaphore.Codec, h)
	}
	apiMode, err := strconv.ParseUint(f.apiMode, 8, 32)
	if err != nil || apiMode&^0o666 != 0 || apiMode&0o600 != 0o600 {
		return none, usageErrorf("agent: --api-mode %q is not an octal mode of read and write bits with the owner's (0600, 0660, 0666)", f.apiMode)
	}
	shareLease := f.shareLease
	if shareLease == 0 {
		shareLease = -1 // off
	}
	prio, err := election.ParsePriority(f.priority)
	if err != nil {
		return none, usageErrorf("agent: --priority: %v", err)
	}
	if f.name == "" {
		f.name, _ = os.Hostname()
	}
	mutant, err := brokenBuild(f.broken, log)
	if err != nil {
		return none, err
	}
	cfg := daemon.AgentConfig{Name: f.name, DataDir: f.data, InMemory: f.inMemory, KeyFile: f.keyFile, Listen: f.listen, Peers: f.peers,
		ClusterSize: f.size, InitialMembers: f.initial, Join: f.join, ElectionTimeout: f.electionTimeout,
		Priority: prio, AllowList: f.allow, Insecure: f.insecure, API: f.api, APIMode: os.FileMode(apiMode), APIGroup: f.apiGroup, ShareLease: shareLease, ShareLinger: f.shareLinger, Logger: log, Broken: mutant,
		Roles: f.roles, HoldCodec: uint64(f.holdCodec), NestedNames: f.nestedNames}
	if f.pskFile != "" {
		if cfg.PSK, err = p2p.ReadPSK(f.pskFile); err != nil {
			return none, usageErrorf("agent: --psk-file: %v", err)
		}
	}
	if f.tokenFile != "" {
		b, err := readToken(f.tokenFile)
		if err != nil {
			return none, usageErrorf("agent: --api-token-file: %v", err)
		}
		cfg.APIToken = strings.TrimSpace(string(b))
		if cfg.APIToken == "" {
			return none, usageErrorf("agent: --api-token-file %s is empty", f.tokenFile)
		}
	}
	cfg.HTTPListen = f.httpListen
	if f.httpTokenFile != "" {
		b, err := readToken(f.httpTokenFile)
		if err != nil {
			return none, usageErrorf("agent: --http-token-file: %v", err)
		}
		if cfg.HTTPToken = strings.TrimSpace(string(b)); cfg.HTTPToken == "" {
			return none, usageErrorf("agent: --http-token-file %s is empty", f.httpTokenFile)
		}
	}
	for _, s := range f.httpAllow {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return none, usageErrorf("agent: --http-allow %q is not a CIDR or an IP address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		cfg.HTTPAllow = append(cfg.HTTPAllow, p.Masked())
	}
	if (cfg.HTTPToken != "" || len(cfg.HTTPAllow) > 0) && cfg.HTTPListen == "" {
		return none, usageErrorf("agent: --http-token-file and --http-allow are for --http-listen")
	}
	return cfg, nil
}

// readToken reads a bearer token's file; one that others may read or
// write is refused (group may: the frontends' group, say).
func readToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := p2p.CheckPrivate(f, path, 0o007); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(f, 4096))
}

// startCPUProfile profiles the process into path until the returned
// function runs (nothing when path is empty). The agent stops on SIGTERM
// through runAgent's return, so the profile is complete then.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, usageErrorf("agent: --cpu-profile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("agent: --cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// writeHeapProfile writes the live heap to path; a failure is only
// reported: the agent stops all the same.
func writeHeapProfile(cmd *cobra.Command, path string) {
	f, err := os.Create(path)
	if err == nil {
		runtime.GC() // the profile shows what the last collection kept
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "sluice agent: heap profile: %v\n", err)
	}
}

// memoryTick is how often the agent's soft memory limit follows its live
// heap: the heap a lock table holds changes over minutes, not seconds.
const memoryTick = 2 * time.Second

// memoryGovernor is what --memory-target asks for: nil when it is off
// (0, or GOMEMLIMIT set in the environment and the flag not given).
func (f *agentFlags) memoryGovernor(cmd *cobra.Command, log *slog.Logger) (*memoryGovernor, error) {
	target, err := parseBytes(f.memoryTarget)
	if err != nil {
		return nil, usageErrorf("agent: --memory-target: %v", err)
	}
	if target == 0 {
		return nil, nil
	}
	given := cmd.Flags().Changed("memory-target") || f.memoryTarget != defaultMemoryTarget // or SLUICE_MEMORY_TARGET, --config
	if os.Getenv("GOMEMLIMIT") != "" && !given {
		log.Info("memory target off: GOMEMLIMIT is set", "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
		return nil, nil
	}
	return &memoryGovernor{target: target, log: log}, nil
}

// memoryGoverned says a memoryGovernor runs in this process.
var memoryGoverned atomic.Bool

// runAgent runs the agent of cfg until SIGINT or SIGTERM, then stops it.
// A heap profile goes to heapProfile first, when it is not empty.
func runAgent(cmd *cobra.Command, cfg daemon.AgentConfig, heapProfile string, memory *memoryGovernor) error {
	ctx, stop := signalContext(cmd)
	defer stop()
	a, err := daemon.StartAgent(ctx, cfg)
	if err != nil {
		return startError(err)
	}
	// The soft limit is the process's: with several agents in one
	// process (tests), the first one started keeps it.
	if memory != nil && memoryGoverned.CompareAndSwap(false, true) {
		defer memoryGoverned.Store(false)
		mctx, cancel := context.WithCancel(ctx)
		ticker := time.NewTicker(memoryTick)
		done := make(chan struct{})
		go func() {
			defer close(done)
			memory.run(mctx, ticker.C)
		}()
		defer func() {
			cancel()
			ticker.Stop()
			<-done
		}()
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "sluice agent: node %s, peer id %s\n  listening on %s\n  API on %s\n",
		cfg.Name, a.Host().PeerID(), strings.Join(a.Host().Addrs(), " "), a.APIAddr())
	if addr := a.OperatorAddr(); addr != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "  operator page on http://%s/ (and /metrics, /healthz, /readyz)\n", addr)
	}
	if err := notifySystemd("READY=1\nSTATUS=serving the API on " + a.APIAddr()); err != nil {
		cfg.Logger.Warn("telling systemd the agent is ready", "err", err)
	}
	<-ctx.Done()
	_ = notifySystemd("STOPPING=1")
	if heapProfile != "" {
		writeHeapProfile(cmd, heapProfile)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.Stop(stopCtx)
}

func newIDCmd() *cobra.Command {
	var data string
	cmd := &cobra.Command{
		Use:   "id",
		Short: "Print this node's peer id (creating its key if needed)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if data == "" {
				return usageErrorf("id: --data DIR is required")
			}
			key, _, err := p2p.LoadOrCreateIdentity(data)
			if err != nil {
				return err
			}
			id, err := p2p.PeerIDOf(key)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), id)
			return err
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "data directory holding the identity key")
	return cmd
}

// nestedNamesUsage is the help of --nested-names, for agent and dev alike.
const nestedNamesUsage = "names nest like URLs and paths: a lease on /site/shop/cart also holds intent tickets on /site and /site/shop, so a drain of /site keeps it out and a writer of /site/blog does not; every agent serving a site needs it (needs cluster codec 4)"

func newDevCmd() *cobra.Command {
	var (
		nodes                          int
		apiAddr, data, lvl, httpListen string
		nestedNames                    bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Start the service on an embedded cluster for development",
		Long: "Start an embedded cluster of --nodes real agents in this process, on\n" +
			"loopback, and serve the first one's API on --api. In memory unless\n" +
			"--data is given. --http-listen 127.0.0.1:PORT serves the first one's\n" +
			"operator page (and /metrics, /healthz, /readyz). Ctrl-C stops it.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if nodes < 1 || nodes > 9 {
				return usageErrorf("dev: --nodes must be 1..9, got %d", nodes)
			}
			log, err := newLogger(cmd.ErrOrStderr(), lvl)
			if err != nil {
				return err
			}
			if httpListen != "" {
				if err := daemon.CheckOperatorListen(httpListen, "", nil); err != nil {
					return usageErrorf("dev: %v (dev serves its operator page on loopback only)", err)
				}
			}
			token := ""
			if api.IsTCPAddr(apiAddr) {
				// A loopback port is open to every local user: it needs a
				// bearer token, made here and printed below.
				b := make([]byte, 16)
				if _, err := rand.Read(b); err != nil {
					return err
				}
				token = hex.EncodeToString(b)
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			cluster, err := startDev(ctx, nodes, apiAddr, token, data, httpListen, nestedNames, log)
			if err != nil {
				return startError(err)
			}
			defer func() {
				stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				cluster.stop(stopCtx)
			}()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "sluice dev: %d nodes on 127.0.0.1, API on %s\n", nodes, cluster.agents[0].APIAddr())
			if token != "" {
				fmt.Fprintf(out, "sluice dev: API token %s\ntry:\n  export SLUICE_API=%s SLUICE_API_TOKEN=%s\n"+
					"  curl -H 'Authorization: Bearer %s' -X POST http://%s/v1/acquire -d '{\"name\":\"/site\",\"mode\":\"read-only\"}'\n",
					token, cluster.agents[0].APIAddr(), token, token, cluster.agents[0].APIAddr())
			} else {
				fmt.Fprintf(out, "try:\n  export SLUICE_API=%s\n  curl --unix-socket %s -X POST http://sluice/v1/acquire -d '{\"name\":\"/site\",\"mode\":\"read-only\"}'\n",
					apiAddr, apiAddr)
			}
			if addr := cluster.agents[0].OperatorAddr(); addr != "" {
				fmt.Fprintf(out, "sluice dev: operator page on http://%s/ (and /metrics, /healthz, /readyz)\n", addr)
			}
			if err := cluster.waitReady(ctx); err == nil {
				fmt.Fprintln(out, "sluice dev: LOCK_READY")
			}
			<-ctx.Done()
			fmt.Fprintln(out, "sluice dev: stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 3, "number of nodes in the embedded cluster (1..9)")
	f.StringVar(&apiAddr, "api", api.DefaultAPI(), "listen address of the local API: a Unix socket path, or a loopback host:port (a token is made and printed)")
	f.StringVar(&data, "data", "", "data directory, one sub-directory per node (default: in memory)")
	f.StringVar(&lvl, "log-level", "warn", "debug, info, warn or error")
	f.StringVar(&httpListen, "http-listen", "", "loopback IP:port of the first node's operator page, /metrics, /healthz and /readyz (default: none)")
	f.BoolVar(&nestedNames, "nested-names", false, nestedNamesUsage)
	return cmd
}

type devCluster struct{ agents []*daemon.Agent }

// startDev starts n agents on loopback; each knows the earlier ones and the
// mesh's announcements tell the earlier ones of the later.
func startDev(ctx context.Context, n int, apiAddr, token, data, httpListen string, nested bool, log *slog.Logger) (*devCluster, error) {
	c := &devCluster{}
	// The identities come first: every node bootstraps with all of them.
	keys := make([]p2p.PrivKey, n)
	var members []string
	for i := range keys {
		var err error
		if data != "" {
			keys[i], _, err = p2p.LoadOrCreateIdentity(filepath.Join(data, fmt.Sprintf("node-%d", i+1)))
		} else {
			keys[i], err = p2p.NewIdentity()
		}
		if err != nil {
			return nil, err
		}
		pid, err := p2p.PeerIDOf(keys[i])
		if err != nil {
			return nil, err
		}
		members = append(members, pid.String())
	}
	var peers []string
	for i := 1; i <= n; i++ {
		cfg := daemon.AgentConfig{Name: fmt.Sprintf("dev-%d", i), InMemory: data == "", InitialMembers: members,
			Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Peers: peers, Logger: log.With("node", i), NestedNames: nested}
		if data != "" {
			cfg.DataDir = filepath.Join(data, fmt.Sprintf("node-%d", i))
		} else {
			cfg.Key = keys[i-1]
		}
		if i == 1 {
			cfg.API, cfg.APIToken, cfg.HTTPListen = apiAddr, token, httpListen
		}
		a, err := daemon.StartAgent(ctx, cfg)
		if err != nil {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c.stop(stopCtx)
			return nil, err
		}
		c.agents = append(c.agents, a)
		peers = append(peers, a.Host().Addrs()...)
	}
	return c, nil
}

// waitReady returns once the API's node is LOCK_READY, or ctx ends.
func (c *devCluster) waitReady(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := c.agents[0].Node().Status(ctx)
		if err != nil {
			return err
		}
		if s.Ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (c *devCluster) stop(ctx context.Context) {
	for _, a := range c.agents {
		_ = a.Stop(ctx)
	}
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/p2p"
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

// brokenBuilds are the deliberately unsafe agents that the integration
// tests start with the hidden --broken flag, to prove that their checks
// catch a lock service that grants twice.
var brokenBuilds = map[string]core.Mutant{
	"":              0,
	"quorum-of-one": core.MutantQuorumOfOne, // every phase completes with one leader's ack
	"not-durable":   core.MutantNotDurable,  // leaders acknowledge tickets they never persist
}

func newAgentCmd() *cobra.Command {
	var (
		name, data, priority, pskFile, apiAddr, tokenFile, logLevel, config, broken string
		listen, peers, allow, initial                                               []string
		size                                                                        int
		inMemory, join                                                              bool
		electionTimeout                                                             time.Duration
	)
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
			if err := applySettings(cmd, config); err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), logLevel)
			if err != nil {
				return err
			}
			if data == "" && !inMemory {
				return usageErrorf("agent: --data DIR is required (or --in-memory)")
			}
			if size < 0 {
				return usageErrorf("agent: --cluster-size must be at least 1, got %d", size)
			}
			if electionTimeout < 0 {
				return usageErrorf("agent: --election-timeout must not be negative, got %s", electionTimeout)
			}
			prio, err := election.ParsePriority(priority)
			if err != nil {
				return usageErrorf("agent: --priority: %v", err)
			}
			if name == "" {
				name, _ = os.Hostname()
			}
			mutant, ok := brokenBuilds[broken]
			if !ok {
				return usageErrorf("agent: --broken: unknown %q", broken)
			}
			if mutant != 0 {
				log.Error("THIS AGENT IS BROKEN ON PURPOSE: it may grant a lock twice; only tests start it so", "broken", broken)
			}
			cfg := daemon.AgentConfig{Name: name, DataDir: data, InMemory: inMemory, Listen: listen, Peers: peers,
				ClusterSize: size, InitialMembers: initial, Join: join, ElectionTimeout: electionTimeout,
				Priority: prio, AllowList: allow, API: apiAddr, Logger: log, Broken: mutant}
			if pskFile != "" {
				if cfg.PSK, err = p2p.ReadPSK(pskFile); err != nil {
					return usageErrorf("agent: --psk-file: %v", err)
				}
			}
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return usageErrorf("agent: --api-token-file: %v", err)
				}
				cfg.APIToken = strings.TrimSpace(string(b))
				if cfg.APIToken == "" {
					return usageErrorf("agent: --api-token-file %s is empty", tokenFile)
				}
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			a, err := daemon.StartAgent(ctx, cfg)
			if err != nil {
				return startError(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "sluice agent: node %s, peer id %s\n  listening on %s\n  API on %s\n",
				name, a.Host().PeerID(), strings.Join(a.Host().Addrs(), " "), a.APIAddr())
			<-ctx.Done()
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return a.Stop(stopCtx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "node name (default: the host name)")
	f.StringVar(&data, "data", "", "data directory: identity key and lock table")
	f.StringSliceVar(&listen, "listen", []string{"/ip4/0.0.0.0/tcp/4001"}, "libp2p listen multiaddrs")
	f.StringSliceVar(&peers, "peers", nil, "other nodes, as multiaddrs ending in /p2p/ID")
	f.StringSliceVar(&initial, "initial-members", nil, "peer ids of the cluster's first members, this node's among them (first start only)")
	f.BoolVar(&join, "join", false, "join the running cluster of --peers as a non-member (then: sluice members add ID)")
	f.IntVar(&size, "cluster-size", 0, "number of initial members, as a check of --initial-members (optional)")
	f.DurationVar(&electionTimeout, "election-timeout", time.Second, "how long an election round may run at first; slow links get more")
	f.StringVar(&priority, "priority", fmt.Sprint(election.DefaultPriority), "election priority 1..14 (1 wins), or off")
	f.StringVar(&pskFile, "psk-file", "", "cluster secret (libp2p swarm key file)")
	f.StringSliceVar(&allow, "allow", nil, "peer ids allowed to connect (default: any with the secret)")
	f.StringVar(&apiAddr, "api", api.DefaultAPI(), "local API address: a Unix socket path, or a loopback host:port")
	f.StringVar(&tokenFile, "api-token-file", "", "bearer token for a TCP API address")
	f.BoolVar(&inMemory, "in-memory", false, "keep everything in memory, with a new identity at every start (dev and tests)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&broken, "broken", "", "")
	_ = f.MarkHidden("broken")
	f.StringVar(&config, "config", "", "YAML file with any of these settings (keys: the flag names); flags win over SLUICE_* environment variables, which win over the file")
	return cmd
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

func newDevCmd() *cobra.Command {
	var (
		nodes              int
		apiAddr, data, lvl string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Start the service on an embedded cluster for development",
		Long: "Start an embedded cluster of --nodes real agents in this process, on\n" +
			"loopback, and serve the first one's API on --api. In memory unless\n" +
			"--data is given. Ctrl-C stops it.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if nodes < 1 || nodes > 9 {
				return usageErrorf("dev: --nodes must be 1..9, got %d", nodes)
			}
			log, err := newLogger(cmd.ErrOrStderr(), lvl)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			cluster, err := startDev(ctx, nodes, apiAddr, data, log)
			if err != nil {
				return startError(err)
			}
			defer func() {
				stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				cluster.stop(stopCtx)
			}()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "sluice dev: %d nodes on 127.0.0.1, API on %s\n", nodes, apiAddr)
			fmt.Fprintf(out, "try:\n  curl --unix-socket %s -X POST http://sluice/v1/acquire -d '{\"name\":\"/site\",\"mode\":\"read-only\"}'\n", apiAddr)
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
	f.StringVar(&apiAddr, "api", api.DefaultAPI(), "listen address of the local API (a Unix socket path)")
	f.StringVar(&data, "data", "", "data directory, one sub-directory per node (default: in memory)")
	f.StringVar(&lvl, "log-level", "warn", "debug, info, warn or error")
	return cmd
}

type devCluster struct{ agents []*daemon.Agent }

// startDev starts n agents on loopback; each knows the earlier ones and the
// mesh's announcements tell the earlier ones of the later.
func startDev(ctx context.Context, n int, apiAddr, data string, log *slog.Logger) (*devCluster, error) {
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
			Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Peers: peers, Logger: log.With("node", i)}
		if data != "" {
			cfg.DataDir = filepath.Join(data, fmt.Sprintf("node-%d", i))
		} else {
			cfg.Key = keys[i-1]
		}
		if i == 1 {
			cfg.API = apiAddr
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

// Command bench measures sluice against etcd on this machine: it builds
// the checkout's sluice, starts 3 sluice agents and a 3-member etcd
// cluster as processes on loopback, durable and in memory, runs the
// benchmark workloads on both, W4 also on a redis-server with
// go-redsync (the read path's reference), and sluice's revocation latency and
// HTTP middleware's cost, and writes a Markdown table, the
// raw numbers (JSON) and a chart (SVG) to the out directory.
//
//	cd integration/bench && go run . -out results
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// storage is where both systems keep their state.
type storage int

const (
	durable storage = iota // on disk, fsync per commit
	memory                 // sluice --in-memory; etcd on a tmpfs
)

func (s storage) String() string {
	if s == durable {
		return "durable"
	}
	return "memory"
}

// config is the run's settings, from the flags.
type config struct {
	out            string
	reps           int
	window, warmup time.Duration
	names, drains  int
	only           []string // workload ids, in the order they run
	storages       []storage
	systems        []string
	profile        bool
	churnCap       time.Duration
	churnStall     time.Duration
	// gomaxprocs, when positive, is GOMAXPROCS for every Go server the
	// harness starts (sluice's agents and proxy, etcd's members alike).
	gomaxprocs int
}

// errUsage marks a bad command line.
var errUsage = errors.New("usage")

func main() {
	if kind := os.Getenv(echoEnv); kind != "" {
		if err := serveEcho(kind); err != nil {
			fmt.Fprintf(os.Stderr, "bench: echo: %v\n", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		stop()
		os.Exit(1)
	}
}

// parseFlags reads the command line. Errors are one line each; -h
// prints the flags to help and returns flag.ErrHelp.
func parseFlags(args []string, help io.Writer) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by the caller, in one line
	var cfg config
	var only, storages, systems string
	var quick bool
	fs.StringVar(&cfg.out, "out", "results", "directory for results.md, results.json, results.svg, logs and profiles")
	fs.IntVar(&cfg.reps, "reps", 3, "repetitions of each workload (the table shows medians)")
	fs.DurationVar(&cfg.window, "window", 5*time.Second, "measured window of each workload run")
	fs.DurationVar(&cfg.warmup, "warmup", time.Second, "warm-up before each window")
	fs.IntVar(&cfg.names, "names", 100_000, "distinct names of the churn")
	fs.IntVar(&cfg.drains, "drains", 20, "drains per W5 and revoke run")
	fs.StringVar(&only, "only", "", "comma list of workloads to run: W1,W2,W3,W4,W4n,W5,revoke,middleware,churn (default all)")
	fs.StringVar(&storages, "storage", "durable,memory", "comma list of storage modes: durable, memory")
	fs.StringVar(&systems, "systems", strings.Join(allSystems, ","), "comma list of systems: sluice, etcd, redis (redis runs W4 only, in memory)")
	fs.BoolVar(&cfg.profile, "profile", false, "each sluice agent writes a CPU profile, and its /metrics text when it stops, into the out directory; the harness its own (cpu-harness.pprof: the clients)")
	fs.BoolVar(&quick, "quick", false, "a short run: -reps 1 -window 1s -names 2000 -drains 5 (flags given win)")
	fs.DurationVar(&cfg.churnCap, "churn-cap", 90*time.Second, "time cap of a churn (the default keeps a whole run within 15 minutes on 2 cores)")
	fs.DurationVar(&cfg.churnStall, "churn-stall", 30*time.Second, "a churn without progress for this long is stopped as stalled")
	fs.IntVar(&cfg.gomaxprocs, "gomaxprocs", 0, "GOMAXPROCS of every Go server (sluice's agents and proxy, etcd's members); 0 leaves Go's default")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(help)
			fmt.Fprintln(help, "usage: go run . [flags]   (in integration/bench)")
			fs.PrintDefaults()
			return cfg, err
		}
		return cfg, fmt.Errorf("%w: %v (go run . -h lists the flags)", errUsage, err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range map[string]string{"reps": "1", "window": "1s", "names": "2000", "drains": "5"} {
			if !set[name] {
				_ = fs.Set(name, v)
			}
		}
	}
	switch {
	case cfg.reps < 1:
		return cfg, fmt.Errorf("%w: -reps must be at least 1, got %d", errUsage, cfg.reps)
	case cfg.window <= 0:
		return cfg, fmt.Errorf("%w: -window must be positive, got %s", errUsage, cfg.window)
	case cfg.warmup < 0:
		return cfg, fmt.Errorf("%w: -warmup must not be negative, got %s", errUsage, cfg.warmup)
	case cfg.names < 1:
		return cfg, fmt.Errorf("%w: -names must be at least 1, got %d", errUsage, cfg.names)
	case cfg.drains < 1:
		return cfg, fmt.Errorf("%w: -drains must be at least 1, got %d", errUsage, cfg.drains)
	case cfg.gomaxprocs < 0:
		return cfg, fmt.Errorf("%w: -gomaxprocs must not be negative, got %d", errUsage, cfg.gomaxprocs)
	case cfg.churnCap <= 0 || cfg.churnStall <= 0:
		return cfg, fmt.Errorf("%w: -churn-cap and -churn-stall must be positive", errUsage)
	case cfg.out == "":
		return cfg, fmt.Errorf("%w: -out must name a directory", errUsage)
	}
	var err error
	var ids []string
	for _, w := range workloads() {
		ids = append(ids, w.id)
	}
	if cfg.only, err = pickList("-only", only, ids); err != nil {
		return cfg, err
	}
	if cfg.systems, err = pickList("-systems", systems, allSystems); err != nil {
		return cfg, err
	}
	st, err := pickList("-storage", storages, []string{"durable", "memory"})
	if err != nil {
		return cfg, err
	}
	for _, s := range st {
		cfg.storages = append(cfg.storages, map[string]storage{"durable": durable, "memory": memory}[s])
	}
	return cfg, nil
}

// pickList reads a comma list of values out of known (case-insensitive),
// in known's order; empty means all.
func pickList(flagName, list string, known []string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return known, nil
	}
	var picked []string
	for v := range strings.SplitSeq(list, ",") {
		v = strings.TrimSpace(v)
		i := slices.IndexFunc(known, func(k string) bool { return strings.EqualFold(k, v) })
		if i < 0 {
			return nil, fmt.Errorf("%w: %s: unknown %q (one of %s)", errUsage, flagName, v, strings.Join(known, ","))
		}
		picked = append(picked, known[i])
	}
	var out []string
	for _, k := range known {
		if slices.Contains(picked, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// logf reports progress on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

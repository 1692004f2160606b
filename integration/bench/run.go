package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// bench is one run of the harness: its settings, what it measured, and
// what did not work.
type bench struct {
	cfg     config
	machine machine
	// floor: the machine's best for each step of a lock (floor.go),
	// measured before any cluster starts.
	floor floor
	runs  []*runResult
	// notes are what the reader must know besides the numbers: a system
	// that did not run, a cluster that failed.
	notes []string
}

// machine describes where the numbers come from.
type machine struct {
	NProc      int    `json:"nproc"`
	CPU        string `json:"cpu"`
	Go         string `json:"go"`
	Etcd       string `json:"etcd,omitempty"`
	EtcdClient string `json:"etcd_client"`
	// Redis is redis-server's version when it ran; RedisClient are
	// go-redsync's and go-redis's versions.
	Redis       string `json:"redis,omitempty"`
	RedisClient string `json:"redis_client"`
	SluiceBuild string `json:"sluice"`
	// LoadAvg is /proc/loadavg at the start: other work on the machine
	// shows in the numbers.
	LoadAvg string `json:"loadavg"`
	// GOMAXPROCS of the servers (-gomaxprocs); 0: Go's default.
	GOMAXPROCS int `json:"gomaxprocs,omitempty"`
}

func (b *bench) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.notes = append(b.notes, msg)
	logf("%s", msg)
}

// run measures what cfg selects and writes the report; stdout gets the
// machine, the table and the elapsed time.
func run(ctx context.Context, cfg config, stdout io.Writer) error {
	start := time.Now()
	b := &bench{cfg: cfg}
	serverProcs = cfg.gomaxprocs
	logDir := filepath.Join(cfg.out, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	profileDir := ""
	if cfg.profile {
		profileDir = cfg.out
		// The clients' side too: in W4 and the middleware the harness's
		// own process, with the clients' library, takes most of the CPU.
		f, err := os.Create(filepath.Join(cfg.out, "cpu-harness.pprof"))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	binDir, err := os.MkdirTemp("", "bench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	logf("building sluice")
	bin, root, err := buildSluice(ctx, binDir)
	if err != nil {
		return err
	}
	b.machine = describeMachine(ctx, root)
	b.machine.GOMAXPROCS = cfg.gomaxprocs
	b.measureFloor(ctx)

	etcdBin, redisBin := "", ""
	if b.needs("etcd", durable) || b.needs("etcd", memory) {
		if etcdBin, err = findEtcd(ctx); err != nil {
			b.note("etcd is not run: %v; sluice runs without it", err)
		} else {
			b.machine.Etcd = etcdVersion(ctx, etcdBin)
		}
	}
	if b.needs("redis", memory) {
		if !slices.Contains(cfg.storages, memory) {
			b.note("redis is not run: it runs in the memory storage mode only (no persistence), and -storage has no memory")
		} else if redisBin, err = findRedis(ctx); err != nil {
			b.note("redis is not run: %v; W4 runs without it", err)
		} else {
			b.machine.Redis = redisVersion(ctx, redisBin)
		}
	}
	logf("%s", b.machine.line())

	bins := map[string]string{"sluice": bin, "etcd": etcdBin, "redis": redisBin}
	for _, st := range cfg.storages {
		if ctx.Err() != nil {
			break
		}
		if err := b.runStorage(ctx, st, bins, logDir, profileDir); err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	if err := b.report(stdout, elapsed); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted after %s; the report has what was measured", elapsed.Round(time.Second))
	}
	return nil
}

// needs reports whether a selected workload runs on the system sys (one
// of -systems) in storage st: redis runs in memory only.
func (b *bench) needs(sys string, st storage) bool {
	if !slices.Contains(b.cfg.systems, sys) || (sys == "redis" && st != memory) {
		return false
	}
	for _, id := range b.cfg.only {
		if workloadByID(id).runsOn(sys) {
			return true
		}
	}
	return false
}

// needsSluice reports whether a selected workload runs on sluice agents
// of nested names (nested) or of flat ones.
func (b *bench) needsSluice(nested bool) bool {
	for _, id := range b.cfg.only {
		if w := workloadByID(id); w.runsOn("sluice") && w.nested == nested {
			return true
		}
	}
	return false
}

// runStorage starts the systems' clusters in one storage mode (those a
// selected workload runs on, whose binary bins has), runs the workloads
// on them and stops them (also when ctx ends).
func (b *bench) runStorage(ctx context.Context, st storage, bins map[string]string, logDir, profileDir string) error {
	var systems []system
	defer func() {
		for _, s := range systems {
			label := s.name()
			if c, ok := s.(*sluiceCluster); ok {
				label = c.label()
			}
			logf("stopping %s %s", label, st)
			s.stop()
		}
	}()
	type start struct {
		name   string
		nested bool
	}
	var starts []start
	for _, name := range b.cfg.systems {
		if !b.needs(name, st) || bins[name] == "" {
			continue
		}
		if name != "sluice" {
			starts = append(starts, start{name: name})
			continue
		}
		// Sluice runs as two clusters when both kinds of workload are
		// selected: --nested-names changes what every name means.
		for _, nested := range []bool{false, true} {
			if b.needsSluice(nested) {
				starts = append(starts, start{name: name, nested: nested})
			}
		}
	}
	for _, sp := range starts {
		name := sp.name
		label := name
		if sp.nested {
			label += " (nested names)"
		}
		logf("starting %s %s", label, st)
		var s system
		var err error
		switch name {
		case "sluice":
			s, err = startSluice(ctx, bins[name], st, sp.nested, logDir, profileDir)
		case "etcd":
			s, err = startEtcd(ctx, bins[name], st, logDir)
		case "redis":
			s, err = startRedis(ctx, bins[name], logDir)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			b.note("%s %s did not start: %v", label, st, err)
			continue
		}
		systems = append(systems, s)
	}
	for rep := range b.cfg.reps {
		// Interleaved, the first system alternating by repetition, so
		// that neither always runs on a fresher machine.
		order := slices.Clone(systems)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, w := range workloads() {
			if w.id == "churn" || !slices.Contains(b.cfg.only, w.id) {
				continue
			}
			for _, s := range order {
				if !w.runsOn(s.name()) || w.nested != isNested(s) {
					continue
				}
				b.measure(ctx, w, s, st, rep)
				if ctx.Err() != nil {
					return nil
				}
			}
		}
	}
	// The churn runs once per system and storage, last: it is long, and it
	// leaves many names behind in the servers.
	if slices.Contains(b.cfg.only, "churn") {
		order := slices.Clone(systems)
		if st == memory {
			slices.Reverse(order)
		}
		churn := workloadByID("churn")
		for _, s := range order {
			if !churn.runsOn(s.name()) || isNested(s) {
				continue
			}
			b.measure(ctx, churn, s, st, 0)
			if ctx.Err() != nil {
				return nil
			}
		}
	}
	return nil
}

// measure runs workload w once on s and records the result.
func (b *bench) measure(ctx context.Context, w workload, s system, st storage, rep int) {
	prefix := fmt.Sprintf("/bench/%s/r%d/%s", st, rep+1, w.id)
	r, err := w.run(ctx, b, s, prefix)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		b.note("%s %s %s rep %d did not run: %v", w.id, s.name(), st, rep+1, err)
		return
	}
	r.System, r.Storage, r.Workload, r.Rep = s.name(), st.String(), w.id, rep+1
	b.runs = append(b.runs, r)
	logf("%s", r.line())
}

// line is a progress line for the run.
func (r *runResult) line() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s rep %d %s:", r.Storage, r.Workload, r.Rep, r.System)
	if len(r.Drains) == 0 && len(r.Revocations) == 0 && r.Middleware == nil {
		fmt.Fprintf(&sb, " %.0f/s", r.Rate)
	}
	if r.Acquire != nil {
		fmt.Fprintf(&sb, ", acquire p50 %.2f ms p99 %.2f ms", r.Acquire.P50, r.Acquire.P99)
	}
	if len(r.PerClient) > 1 {
		fmt.Fprintf(&sb, ", fairness %.2f", r.Fairness)
	}
	if len(r.Drains) > 0 {
		var worst float64
		for _, d := range r.Drains {
			worst = max(worst, d.AfterLastReleaseMS)
		}
		fmt.Fprintf(&sb, " %d drains, writer grant at most %.2f ms after the last reader release", len(r.Drains), worst)
	}
	if len(r.Revocations) > 0 {
		var revs []time.Duration
		unseen := 0
		for _, s := range r.Revocations {
			if s.RevocationMS == nil {
				unseen++
				continue
			}
			revs = append(revs, time.Duration(*s.RevocationMS*float64(time.Millisecond)))
		}
		fmt.Fprintf(&sb, " %d drains", len(r.Revocations))
		if l := summarizeLatency(revs); l != nil {
			fmt.Fprintf(&sb, ", revocation p50 %.2f ms max %.2f ms", l.P50, l.Max)
		}
		if unseen > 0 {
			fmt.Fprintf(&sb, ", %d without a draining refusal at every agent", unseen)
		}
	}
	if m := r.Middleware; m != nil && m.Plain != nil && m.Wrapped != nil {
		fmt.Fprintf(&sb, " plain %.0f/s p50 %.0f µs p99 %.0f µs; middleware %.0f/s p50 %.0f µs p99 %.0f µs",
			m.PlainRate, 1000*m.Plain.P50, 1000*m.Plain.P99, m.WrappedRate, 1000*m.Wrapped.P50, 1000*m.Wrapped.P99)
		if m.Proxied != nil {
			fmt.Fprintf(&sb, "; sluice proxy %.0f/s p50 %.0f µs p99 %.0f µs (added p50 %.0f µs, p99 %.0f µs)",
				m.ProxiedRate, 1000*m.Proxied.P50, 1000*m.Proxied.P99, 1000*(m.Proxied.P50-m.Plain.P50), 1000*(m.Proxied.P99-m.Plain.P99))
		}
		if m.BareProxied != nil {
			fmt.Fprintf(&sb, "; bare reverse proxy p50 %.0f µs (added %.0f µs)", 1000*m.BareProxied.P50, 1000*(m.BareProxied.P50-m.Plain.P50))
		}
		if m.CrowdPlainRate > 0 {
			fmt.Fprintf(&sb, "; %d clients: plain %.0f/s, middleware %.0f/s (%.0f%% kept)",
				crowdClients, m.CrowdPlainRate, m.CrowdWrappedRate, 100*m.CrowdWrappedRate/m.CrowdPlainRate)
		}
	}
	if c := r.Churn; c != nil {
		fmt.Fprintf(&sb, ", %d of %d names in %.1f s (stalled %v, capped %v)", c.Done, c.Names, c.Seconds, c.Stalled, c.Capped)
	}
	if n := r.errorCount(); n > 0 {
		fmt.Fprintf(&sb, ", %d errors (%.2f%%): %v", n, 100*r.ErrorRate, r.Errors)
	}
	if len(r.Refused) > 0 {
		fmt.Fprintf(&sb, ", refused %v", r.Refused)
	}
	return sb.String()
}

// describeMachine gathers the machine's description; root is the sluice
// checkout.
func describeMachine(ctx context.Context, root string) machine {
	m := machine{NProc: runtime.NumCPU(), Go: runtime.Version(), CPU: cpuModel(), EtcdClient: "unknown", SluiceBuild: "unknown"}
	redsyncV, goredisV := "unknown", "unknown"
	m.LoadAvg = loadAvg()
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "describe", "--always", "--dirty", "--tags").Output(); err == nil {
		m.SluiceBuild = strings.TrimSpace(string(out))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "go.etcd.io/etcd/client/v3":
				m.EtcdClient = d.Version
			case "github.com/go-redsync/redsync/v4":
				redsyncV = d.Version
			case "github.com/redis/go-redis/v9":
				goredisV = d.Version
			}
		}
	}
	m.RedisClient = fmt.Sprintf("go-redsync %s on go-redis %s", redsyncV, goredisV)
	return m
}

// loadAvg is the 1, 5 and 15 minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func (m machine) line() string {
	etcd := m.Etcd
	if etcd == "" {
		etcd = "not run"
	}
	redis := ""
	if m.Redis != "" {
		redis = fmt.Sprintf(", redis-server %s (client %s)", m.Redis, m.RedisClient)
	}
	procs := ""
	if m.GOMAXPROCS > 0 {
		procs = fmt.Sprintf("; every Go server with GOMAXPROCS=%d", m.GOMAXPROCS)
	}
	return fmt.Sprintf("Machine: %d CPUs (%s), load average %s at the start, %s, etcd server %s (client go.etcd.io/etcd/client/v3 %s)%s, sluice %s%s",
		m.NProc, m.CPU, m.LoadAvg, m.Go, etcd, m.EtcdClient, redis, m.SluiceBuild, procs)
}

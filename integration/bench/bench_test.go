package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"go.uber.org/goleak"
)

// TestQuick runs the harness in its quick mode, sluice alone and in
// memory, W1, the revocation, the middleware and the churn, and checks
// what it writes: the table's rows, the raw numbers, a chart that is
// valid SVG. Every agent is stopped and no goroutine is left.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-agent cluster; not with -short")
	}
	defer goleak.VerifyNone(t)
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-quick", "-systems", "sluice", "-storage", "memory", "-only", "W1,revoke,middleware,churn", "-out", out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout bytes.Buffer
	if err := run(ctx, cfg, &stdout); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != string(md) {
		t.Errorf("stdout is not results.md:\n%s", stdout.String())
	}
	for _, want := range []string{
		"| Workload | Storage | Metric | sluice | etcd | sluice/etcd | floor | sluice over floor | Target | Result |",
		"| W1 | memory | cycles/s | ",
		"| W1 | memory | acquire p99 | ",
		"| revoke | memory | revocation latency (writer's ask → first draining refusal, latest agent), p99 | ",
		"| revoke | memory | writer grant − last reader release, p99 | ",
		"| middleware | memory | request latency p50, plain handler | ",
		"| middleware | memory | request latency p99, behind client.Middleware | ",
		"| middleware | memory | middleware added latency p50 | ",
		"| churn | memory | names/s overall | ",
		"| churn | memory | names done | 2,000 of 2,000 ",
		"| churn | memory | max server RSS after | ",
		"Machine: ",
		"Elapsed: ",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(string(md), "| W2 ") {
		t.Errorf("results.md has W2, which -only left out:\n%s", md)
	}

	var raw struct {
		Runs []runResult `json:"runs"`
		Rows []row       `json:"rows"`
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if len(raw.Runs) != 4 || raw.Runs[0].Workload != "W1" || raw.Runs[0].Cycles == 0 ||
		len(raw.Runs[1].Revocations) != cfg.drains || raw.Runs[2].Middleware == nil || raw.Runs[3].Churn == nil {
		t.Errorf("results.json runs: %+v", raw.Runs)
	} else {
		for _, s := range raw.Runs[1].Revocations {
			if len(s.AgentMS) != 3 {
				t.Errorf("revocation without a figure per agent: %+v", s)
			}
		}
		if m := raw.Runs[2].Middleware; m.Plain == nil || m.Wrapped == nil || m.Plain.N == 0 || m.Wrapped.N == 0 ||
			m.CrowdPlainRate == 0 || m.CrowdWrappedRate == 0 {
			t.Errorf("middleware: %+v", m)
		}
	}
	for _, r := range raw.Runs {
		if r.ErrorRate > 0 {
			t.Errorf("%s: errors %v: %q", r.Workload, r.Errors, r.ErrorSamples)
		}
	}
	checkSVG(t, filepath.Join(out, "results.svg"), true)
	for _, log := range []string{"sluice-memory-n1.log", "sluice-memory-n2.log", "sluice-memory-n3.log"} {
		if _, err := os.Stat(filepath.Join(out, "logs", log)); err != nil {
			t.Errorf("agent log: %v", err)
		}
	}
}

// TestQuickRedis runs W4 in the quick mode on sluice and redis in
// memory: redis's columns, its target row, its log, and its process
// stopped with no goroutine left. It needs redis-server installed: the
// harness installs it when missing, the test does not.
func TestQuickRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-agent cluster and redis-server; not with -short")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if _, err := os.Stat("/usr/bin/redis-server"); err != nil {
			t.Skip("redis-server is not installed (apt-get install -y redis-server, or a run of the harness, installs it)")
		}
	}
	defer goleak.VerifyNone(t)
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-quick", "-systems", "sluice,redis", "-storage", "memory", "-only", "W4", "-out", out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout bytes.Buffer
	if err := run(ctx, cfg, &stdout); err != nil {
		t.Fatal(err)
	}
	md := stdout.String()
	for _, want := range []string{
		"| Workload | Storage | Metric | sluice | etcd | sluice/etcd | redis+redsync | sluice/redis | floor | sluice over floor | Target | Result |",
		"| W4 | memory | grants/s | ",
		"| ≥2× Redis+redsync | ",
		"| W4 | memory | acquire p99 | ",
		"| ≤2 ms | ",
		"redis-server ",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	var raw struct {
		Runs []runResult `json:"runs"`
		Rows []row       `json:"rows"`
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if len(raw.Runs) != 2 || raw.Runs[1].System != "redis" || raw.Runs[1].Cycles == 0 || raw.Runs[1].ErrorRate > 0 {
		t.Errorf("results.json runs: %+v", raw.Runs)
	}
	if len(raw.Rows) == 0 || raw.Rows[0].Redis == nil || raw.Rows[0].RedisRatio == nil {
		t.Errorf("results.json: W4's first row has no redis figures: %+v", raw.Rows)
	}
	if _, err := os.Stat(filepath.Join(out, "logs", "redis-memory.log")); err != nil {
		t.Errorf("redis log: %v", err)
	}
	checkSVG(t, filepath.Join(out, "results.svg"), false) // W4 alone: no churn line
}

// TestQuickNested runs W4 and W4n in the quick mode, sluice in memory:
// two clusters, the second with --nested-names (ready only at the codec
// nested names need), W4n's rows beside W4's with their ratios, no
// errors, each cluster's logs, no goroutine left.
func TestQuickNested(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two 3-agent clusters; not with -short")
	}
	defer goleak.VerifyNone(t)
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-quick", "-systems", "sluice", "-storage", "memory", "-only", "W4n,W4", "-out", out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout bytes.Buffer
	if err := run(ctx, cfg, &stdout); err != nil {
		t.Fatal(err)
	}
	md := stdout.String()
	for _, want := range []string{
		"| W4 | memory | grants/s | ",
		"| W4n | memory | grants/s | ",
		"| W4n | memory | grants/s, nested ÷ flat (W4) | ",
		"| W4n | memory | acquire p99 | ",
		"| W4n | memory | acquire p99, nested ÷ flat (W4) | ",
		"- W4n: ",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	var raw struct {
		Runs []runResult `json:"runs"`
		Rows []row       `json:"rows"`
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if len(raw.Runs) != 2 || raw.Runs[0].Workload != "W4" || raw.Runs[1].Workload != "W4n" {
		t.Fatalf("results.json runs: %+v", raw.Runs)
	}
	for _, r := range raw.Runs {
		if r.Cycles == 0 || r.ErrorRate > 0 {
			t.Errorf("%s: %d grants, errors %v: %q", r.Workload, r.Cycles, r.Errors, r.ErrorSamples)
		}
	}
	for _, r := range raw.Rows {
		if r.Workload == "W4n" && strings.Contains(r.Metric, "÷") && r.Sluice == nil {
			t.Errorf("results.json: %q has no ratio", r.Metric)
		}
	}
	for _, log := range []string{"sluice-memory-n1.log", "sluice-nested-memory-n1.log"} {
		if _, err := os.Stat(filepath.Join(out, "logs", log)); err != nil {
			t.Errorf("agent log: %v", err)
		}
	}
}

// TestReport checks the table, the JSON rows and the chart of made-up
// runs of W4 (with redis), the revocation and the middleware: the
// targets' verdicts, the redis columns and the ratios.
func TestReport(t *testing.T) {
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-only", "W4,W4n,revoke,middleware", "-storage", "memory", "-out", out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	b := &bench{cfg: cfg, floor: floor{P2PRoundTripMS: f(0.05), SocketCallMS: f(0.01), FsyncMS: f(0.3), ProxyHopMS: f(0.1), CrowdCallP99MS: f(1)}, runs: []*runResult{
		{System: "sluice", Storage: "memory", Workload: "W4", Rep: 1, Rate: 50_000, Attempts: 1000, Acquire: &latency{P50: 0.4, P99: 1.5}},
		{System: "etcd", Storage: "memory", Workload: "W4", Rep: 1, Rate: 5_000, Attempts: 1000, Acquire: &latency{P50: 4, P99: 20}},
		{System: "redis", Storage: "memory", Workload: "W4", Rep: 1, Rate: 20_000, Attempts: 1000, Acquire: &latency{P50: 1, P99: 4}},
		{System: "sluice", Storage: "memory", Workload: "W4n", Rep: 1, Rate: 35_000, Attempts: 1000, Acquire: &latency{P50: 0.5, P99: 3}},
		{System: "sluice", Storage: "memory", Workload: "revoke", Rep: 1, Attempts: 1000, Revocations: []revokeSample{
			{AgentMS: []*float64{f(1), f(3), f(2)}, RevocationMS: f(3), Drain: &drainSample{AfterLastReleaseMS: 0.5}},
			{AgentMS: []*float64{f(4), f(12), f(2)}, RevocationMS: f(12), Drain: &drainSample{AfterLastReleaseMS: 1}},
			{AgentMS: []*float64{f(1), nil, f(2)}},
		}},
		{System: "sluice", Storage: "memory", Workload: "middleware", Rep: 1, Attempts: 1000, Middleware: &middlewareResult{
			Plain: &latency{P50: 0.02, P99: 0.1}, Wrapped: &latency{P50: 0.1, P99: 0.5}, PlainRate: 40_000, WrappedRate: 8_000,
			Proxied: &latency{P50: 0.17, P99: 0.6}, ProxiedRate: 7_000, CrowdPlainRate: 30_000, CrowdWrappedRate: 24_000}},
	}}
	var md bytes.Buffer
	if err := b.report(&md, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Floor (medians on this machine): libp2p round trip 50 µs, Unix-socket call 10 µs, fsync 300 µs, a bare reverse proxy's hop 100 µs; p99 of a Unix-socket call with 64 callers at once 1000 µs.",
		"| Workload | Storage | Metric | sluice | etcd | sluice/etcd | redis+redsync | sluice/redis | floor | sluice over floor | Target | Result |",
		"| W4 | memory | grants/s | 50,000/s | 5,000/s | 10.00× | 20,000/s | 2.50× | 3,200,000/s (page view: 2 calls, 64 at once) | 64.00× | ≥2× Redis+redsync | met |",
		"| W4 | memory | acquire p99 | 1.50 ms | 20.00 ms | 0.07× | 4.00 ms | 0.38× | 1.00 ms (try: p99 of 1 call, 64 callers at once) | 1.50× | ≤2 ms | met |",
		"| W4 | memory | tries refused (timedout / draining) | 0 / 0 | 0 / 0 | — | — | — | — | — | — | — |",
		"| W4n | memory | grants/s | 35,000/s | — | — | — | — | — | — | — | — |",
		"| W4n | memory | grants/s, nested ÷ flat (W4) | 0.70× | — | — | — | — | — | — | ≥0.8× | missed |",
		"| W4n | memory | acquire p99 | 3.00 ms | — | — | — | — | — | — | ≤2 ms | missed |",
		"| W4n | memory | acquire p99, nested ÷ flat (W4) | 2.00× | — | — | — | — | — | — | — | — |",
		"| revoke | memory | revocation latency (writer's ask → first draining refusal, latest agent), p50 | 3.00 ms | — | — | — | — | — | — | — | — |",
		"| revoke | memory | revocation latency (writer's ask → first draining refusal, latest agent), p99 | 12.00 ms | — | — | — | — | — | — | ≤10 ms | missed |",
		"| revoke | memory | writer grant − last reader release, p99 | 1.00 ms | ",
		"| revoke | memory | drains with a draining refusal at every agent | 2 of 3 | ",
		"| middleware | memory | request latency p50, plain handler | 20 µs | ",
		"| middleware | memory | middleware added latency p50 | 80 µs | — | — | — | — | — | — | ≤50 µs | missed |",
		"| middleware | memory | requests/s, plain / behind the middleware | 40,000/s / 8,000/s | ",
		"| middleware | memory | requests/s with 200 clients, plain / behind the middleware | 30,000/s / 24,000/s | ",
		"| middleware | memory | throughput kept behind the middleware with 200 clients | 80 % | — | — | — | — | — | — | ≥70 % | met |",
		"| middleware | memory | sluice proxy added latency p50 (vs the handler hit directly) | 150 µs | — | — | — | — | 100 µs (a bare reverse proxy's hop; no call to the agent on the lent lease) | 1.50× | ≤100 µs | missed |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md.String())
		}
	}
	var raw struct {
		Rows []row `json:"rows"`
	}
	j, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j, &raw); err != nil {
		t.Fatal(err)
	}
	if r := raw.Rows[0]; r.Redis == nil || *r.Redis != 20_000 || r.RedisRatio == nil || *r.RedisRatio != 2.5 {
		t.Errorf("results.json W4 row: %+v", r)
	}
	svg, err := os.ReadFile(filepath.Join(out, "results.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "W4 memory redis: 20,000/s") {
		t.Errorf("results.svg has no redis bar for W4")
	}

	if i := slices.IndexFunc(raw.Rows, func(r row) bool { return r.Metric == "grants/s, nested ÷ flat (W4)" }); i < 0 ||
		raw.Rows[i].Sluice == nil || *raw.Rows[i].Sluice != 0.7 || raw.Rows[i].Etcd != nil {
		t.Errorf("results.json has no W4n ratio of 0.7: %+v", raw.Rows)
	}
	if !strings.Contains(string(svg), "W4n memory sluice: 35,000/s") {
		t.Errorf("results.svg has no bar for W4n")
	}

	// Without W4's sluice runs, W4n's ratios are not known.
	flat := b.runs
	b.runs = slices.DeleteFunc(slices.Clone(b.runs), func(r *runResult) bool { return r.Workload == "W4" && r.System == "sluice" })
	md.Reset()
	if err := b.report(&md, time.Second); err != nil {
		t.Fatal(err)
	}
	if want := "| W4n | memory | grants/s, nested ÷ flat (W4) | — | — | — | — | — | — | — | ≥0.8× | n/a |"; !strings.Contains(md.String(), want) {
		t.Errorf("results.md without W4's sluice runs lacks %q:\n%s", want, md.String())
	}
	b.runs = flat

	// Without redis's runs, the table keeps its columns.
	b.runs = slices.DeleteFunc(b.runs, func(r *runResult) bool { return r.System == "redis" })
	md.Reset()
	if err := b.report(&md, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Workload | Storage | Metric | sluice | etcd | sluice/etcd | floor | sluice over floor | Target | Result |",
		"| W4 | memory | grants/s | 50,000/s | 5,000/s | 10.00× | 3,200,000/s (page view: 2 calls, 64 at once) | 64.00× | ≥2× Redis+redsync | n/a |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("results.md without redis lacks %q:\n%s", want, md.String())
		}
	}
}

// checkSVG parses the chart as XML: an <svg> root with bars and a line.
func checkSVG(t *testing.T, path string, churn bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	seen := map[string]int{}
	var root string
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("results.svg is not valid XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			seen[se.Name.Local]++
		}
	}
	if root != "svg" || seen["rect"] < 2 || churn && seen["polyline"] < 1 || seen["text"] == 0 {
		t.Errorf("results.svg: root %q, elements %v", root, seen)
	}
}

// Bad flags are one clear error each.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-reps", "0"},
		{"-window", "-1s"},
		{"-names", "many"},
		{"-only", "W1,W9"},
		{"-storage", "ssd"},
		{"-gomaxprocs", "-1"},
		{"-systems", "zookeeper"},
		{"-only", "W4,revocation"},
		{"-bogus"},
		{"extra"},
	} {
		_, err := parseFlags(args, io.Discard)
		if !errors.Is(err, errUsage) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line of usage error", args, err)
		}
	}
	cfg, err := parseFlags([]string{"-quick", "-reps", "2", "-only", "churn,w1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.reps != 2 || cfg.window != time.Second || cfg.names != 2000 || strings.Join(cfg.only, ",") != "W1,churn" {
		t.Errorf("-quick with -reps 2: %+v", cfg)
	}
	cfg, err = parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.systems, ","); got != "sluice,etcd,redis" {
		t.Errorf("default -systems: %s", got)
	}
	if got := strings.Join(cfg.only, ","); got != "W1,W2,W3,W4,W4n,W5,revoke,middleware,churn" {
		t.Errorf("default -only: %s", got)
	}
}

// Each system starts only where a selected workload runs on it: redis
// for W4 in memory, etcd not for sluice's own workloads.
func TestNeeds(t *testing.T) {
	for _, c := range []struct {
		only, sys string
		st        storage
		want      bool
	}{
		{"W4", "redis", memory, true},
		{"W4", "redis", durable, false},
		{"W1,churn", "redis", memory, false},
		{"revoke,middleware", "etcd", memory, false},
		{"revoke,middleware", "sluice", durable, true},
		{"W5", "etcd", durable, true},
		{"W4n", "sluice", durable, true},
		{"W4n", "etcd", memory, false},
		{"W4n", "redis", memory, false},
	} {
		cfg, err := parseFlags([]string{"-only", c.only}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := (&bench{cfg: cfg}).needs(c.sys, c.st); got != c.want {
			t.Errorf("-only %s: needs(%s, %s) = %v, want %v", c.only, c.sys, c.st, got, c.want)
		}
	}
	// Sluice's clusters: flat for every workload but W4n, nested for W4n.
	for _, c := range []struct {
		only         string
		flat, nested bool
	}{
		{"W4n", false, true},
		{"W4", true, false},
		{"W4,W4n", true, true},
		{"churn,revoke", true, false},
	} {
		cfg, err := parseFlags([]string{"-only", c.only}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		b := &bench{cfg: cfg}
		if flat, nested := b.needsSluice(false), b.needsSluice(true); flat != c.flat || nested != c.nested {
			t.Errorf("-only %s: flat cluster %v, nested %v; want %v, %v", c.only, flat, nested, c.flat, c.nested)
		}
	}
}

// W4n's name has the three levels of a URL, the site its own per run.
func TestNestedName(t *testing.T) {
	name := nestedName("/bench/memory/r2/W4n")
	path, err := semaphore.NamePath(name)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://bench-memory-r2-w4n.example/", "https://bench-memory-r2-w4n.example/section", name}
	if !slices.Equal(path, want) {
		t.Errorf("NamePath(%q) = %q, want %q", name, path, want)
	}
	if nestedName("/bench/durable/r2/W4n") == name {
		t.Errorf("two storages share the name %q", name)
	}
}

// TestFloor measures the floor's four steps on this machine: each is
// measured (none fails) and positive; their size is the machine's.
func TestFloor(t *testing.T) {
	b := &bench{}
	b.measureFloor(t.Context())
	if len(b.notes) > 0 {
		t.Fatalf("floor not measured: %v", b.notes)
	}
	for name, v := range map[string]*float64{"libp2p round trip": b.floor.P2PRoundTripMS,
		"socket call": b.floor.SocketCallMS, "fsync": b.floor.FsyncMS, "proxy hop": b.floor.ProxyHopMS,
		"crowded socket call p99": b.floor.CrowdCallP99MS} {
		if v == nil || *v <= 0 {
			t.Errorf("%s: %v", name, v)
		}
	}
	t.Log(b.floor.line())
	m, _ := floorModelOf("W1", durable, 1)
	want := 2**b.floor.P2PRoundTripMS + 2**b.floor.SocketCallMS + *b.floor.FsyncMS
	if got := b.floor.latencyMS(m); got == nil || *got != want {
		t.Errorf("W1's durable floor %v, want %v", got, want)
	}
}

// TestMain makes the test binary the floor's echo process too, as the
// harness's own binary is (startEcho runs os.Executable).
func TestMain(m *testing.M) {
	if kind := os.Getenv(echoEnv); kind != "" {
		if err := serveEcho(kind); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

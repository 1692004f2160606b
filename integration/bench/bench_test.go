package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestQuick runs the harness in its quick mode, sluice alone and in
// memory, W1 and the churn, and checks what it writes: the table's rows,
// the raw numbers, a chart that is valid SVG. Every agent is stopped and
// no goroutine is left.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-agent cluster; not with -short")
	}
	defer goleak.VerifyNone(t)
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-quick", "-systems", "sluice", "-storage", "memory", "-only", "W1,churn", "-out", out}, io.Discard)
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
		"| Workload | Storage | Metric | sluice | etcd | sluice/etcd | Target | Result |",
		"| W1 | memory | cycles/s | ",
		"| W1 | memory | acquire p99 | ",
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
	if len(raw.Runs) != 2 || raw.Runs[0].Workload != "W1" || raw.Runs[0].Cycles == 0 || raw.Runs[1].Churn == nil {
		t.Errorf("results.json runs: %+v", raw.Runs)
	}
	for _, r := range raw.Runs {
		if r.ErrorRate > 0 {
			t.Errorf("%s: errors %v: %q", r.Workload, r.Errors, r.ErrorSamples)
		}
	}
	checkSVG(t, filepath.Join(out, "results.svg"))
	for _, log := range []string{"sluice-memory-n1.log", "sluice-memory-n2.log", "sluice-memory-n3.log"} {
		if _, err := os.Stat(filepath.Join(out, "logs", log)); err != nil {
			t.Errorf("agent log: %v", err)
		}
	}
}

// checkSVG parses the chart as XML: an <svg> root with bars and a line.
func checkSVG(t *testing.T, path string) {
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
	if root != "svg" || seen["rect"] < 2 || seen["polyline"] < 1 || seen["text"] == 0 {
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
		{"-systems", "zookeeper"},
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
}

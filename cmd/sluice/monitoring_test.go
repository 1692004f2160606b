package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/semaphore/daemon"
)

// TestMonitoringFiles: every series the alert rules and the Grafana
// dashboard in monitoring/ name is one a real agent serves at /metrics;
// with promtool installed (Debian's prometheus), the rules and the
// agent's metrics pass `promtool check rules` and `promtool check metrics`.
func TestMonitoringFiles(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	a, err := daemon.StartAgent(context.Background(), daemon.AgentConfig{Name: "m", InMemory: true,
		Listen: []string{"/ip4/127.0.0.1/tcp/0"}, API: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
	}()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://sluice/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %d %v", resp.StatusCode, err)
	}
	served := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			served[strings.Fields(name)[0]] = true
		}
	}
	series := regexp.MustCompile(`\b(sluice|process|go)_[a-z_]+`)
	check := func(file, expr string) {
		for _, name := range series.FindAllString(expr, -1) {
			base := name
			for _, s := range []string{"_bucket", "_count", "_sum"} {
				base = strings.TrimSuffix(base, s)
			}
			if !served[name] && !served[base] {
				t.Errorf("%s: %q is not a series the agent serves", file, name)
			}
		}
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile("monitoring/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil || len(rules.Groups) == 0 {
		t.Fatalf("alerts.yml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			check("alerts.yml "+r.Alert, r.Expr)
		}
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err = os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			check("dashboard.json "+p.Title, tg.Expr)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (Debian: apt-get install prometheus): its checks skipped")
		return
	}
	if out, err := exec.Command(promtool, "check", "rules", "monitoring/alerts.yml").CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(string(body))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

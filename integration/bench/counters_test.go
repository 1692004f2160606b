package main

import (
	"net"
	"net/http"
	"path/filepath"
	"testing"
)

// TestAgentCounters reads the counters from agents' /metrics on their
// sockets, sums them, and divides their growth by the cycles.
func TestAgentCounters(t *testing.T) {
	var socks []string
	for _, body := range []string{
		"# HELP sluice_store_syncs_total x\nsluice_store_syncs_total 10\nsluice_store_submits_total 12\n" +
			"sluice_store_commit_seconds_sum 0.002\nsluice_store_commit_seconds_count 10\nprocess_cpu_seconds_total 1.5\n" +
			"sluice_messages_total{direction=\"in\"} 99\nsluice_messages_total{direction=\"out\"} 40\n" +
			"sluice_peer_messages_total{kind=\"report\"} 7\nsluice_peer_messages_total{kind=\"enter\"} 3\nsluice_one_round_doorways_total 4\n" +
			"sluice_mesh_writes_total 6\n",
		"sluice_store_syncs_total 5\nsluice_store_submits_total 6\nsluice_messages_total{direction=\"out\"} 20\nprocess_cpu_seconds_total 0.5\n" +
			"sluice_peer_messages_total{kind=\"report\"} 3\nsluice_mesh_writes_total 2\n",
	} {
		sock := filepath.Join(t.TempDir(), "api.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write([]byte(body))
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		socks = append(socks, sock)
	}
	c := &sluiceCluster{socks: socks}
	got, err := c.counters(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"fsyncs": 15, "batches": 18, "messages": 60, "commit_seconds": 0.002, "cpu_seconds": 2,
		"reports": 10, "one_round": 4, "writes": 8}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	per := perCycle(map[string]float64{"fsyncs": 5, "batches": 8, "messages": 0}, got, 5)
	if per["fsyncs"] != 2 || per["batches"] != 2 || per["messages"] != 12 {
		t.Errorf("per cycle: %v", per)
	}
	if perCycle(nil, got, 5) != nil || perCycle(got, got, 0) != nil {
		t.Error("per cycle without a reading or cycles is not nil")
	}
	// A commit's mean: the seconds' growth over the fsyncs' (10 commits
	// took 1 ms here).
	per = perCycle(map[string]float64{"fsyncs": 5, "commit_seconds": 0.001}, got, 5)
	ms := perCycleMetrics()
	commit := ms[len(ms)-1]
	if v := commit.value([]*runResult{{PerCycle: per}}); v == nil || commit.format(*v) != "100 µs" {
		t.Errorf("commit mean: %v", v)
	}
	if v := commit.value([]*runResult{{PerCycle: map[string]float64{"fsyncs": 0}}}); v != nil {
		t.Errorf("commit mean without commits: %v, want none", *v)
	}
	// The agents' CPU a cycle: 1.5 s over 5 cycles.
	cpu := ms[len(ms)-2]
	per = perCycle(map[string]float64{"cpu_seconds": 0.5}, got, 5)
	if v := cpu.value([]*runResult{{PerCycle: per}}); v == nil || cpu.format(*v) != "300000 µs" {
		t.Errorf("CPU per cycle: %v", v)
	}
}

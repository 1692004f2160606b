package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/p2p"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// An in-memory agent with a key file runs under that file's identity, so
// that in-memory clusters can be bootstrapped with --initial-members; the
// file must exist, carry the data directory's key name, and go with
// InMemory only.
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	key, _, err := p2p.LoadOrCreateIdentity(dir) // what `sluice id --data DIR` does
	if err != nil {
		t.Fatal(err)
	}
	want, err := p2p.PeerIDOf(key)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, p2p.IdentityFile)
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	a, err := daemon.StartAgent(ctx, daemon.AgentConfig{Name: "keyed", InMemory: true, KeyFile: keyFile,
		InitialMembers: []string{want.String()}, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Host().PeerID(); got != want {
		t.Errorf("peer id %s, want the key file's %s", got, want)
	}
	if err := a.Stop(ctx); err != nil {
		t.Error(err)
	}
	// The key file stays as it was: an in-memory node marks nothing used.
	if _, err := os.Stat(filepath.Join(dir, p2p.FreshFile)); err != nil {
		t.Errorf("the fresh marker beside the key file went: %v", err)
	}

	other := filepath.Join(dir, "other.key")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]daemon.AgentConfig{
		"with --data":    {DataDir: t.TempDir(), KeyFile: keyFile},
		"missing":        {InMemory: true, KeyFile: filepath.Join(t.TempDir(), p2p.IdentityFile)},
		"other name":     {InMemory: true, KeyFile: other},
		"key and a file": {InMemory: true, KeyFile: keyFile, Key: key},
	} {
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		if a, err := daemon.StartAgent(ctx, cfg); !errors.Is(err, daemon.ErrConfig) {
			if err == nil {
				_ = a.Stop(ctx)
			}
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

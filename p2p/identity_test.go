package p2p

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestIdentityPersists(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	k1, _, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	k2, _, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equals(k2) || idOf(t, k1) != idOf(t, k2) {
		t.Fatal("the identity changed between calls")
	}
	if err := MarkIdentityUsed(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, IdentityFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir: %v %v", st, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("leftover files: %v", ents)
	}

	if _, _, err := LoadOrCreateIdentity(""); !errors.Is(err, ErrIdentity) {
		t.Fatalf("empty dir: %v", err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, IdentityFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateIdentity(bad); !errors.Is(err, ErrIdentity) {
		t.Fatalf("garbled key: %v", err)
	}
}

// TestIdentityFresh: a key is fresh from its creation until
// MarkIdentityUsed, across any number of loads, and stays the same key.
func TestIdentityFresh(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	marker := filepath.Join(dir, FreshFile)
	k1, fresh, err := LoadOrCreateIdentity(dir)
	if err != nil || !fresh {
		t.Fatalf("created: fresh %v, %v", fresh, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("no marker after creating the key: %v", err)
	}
	k2, fresh, err := LoadOrCreateIdentity(dir)
	if err != nil || !fresh {
		t.Fatalf("loaded before use: fresh %v, %v", fresh, err)
	}
	if err := MarkIdentityUsed(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("marker after MarkIdentityUsed: %v", err)
	}
	k3, fresh, err := LoadOrCreateIdentity(dir)
	if err != nil || fresh {
		t.Fatalf("loaded after use: fresh %v, %v", fresh, err)
	}
	if !k1.Equals(k2) || !k1.Equals(k3) {
		t.Fatal("the identity changed between calls")
	}
	if err := MarkIdentityUsed(dir); err != nil {
		t.Fatalf("MarkIdentityUsed without a marker: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("leftover files: %v", ents)
	}

	// A crash between the marker and the key: the next call makes a key,
	// fresh.
	crashed := t.TempDir()
	if err := os.WriteFile(filepath.Join(crashed, FreshFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, fresh, err := LoadOrCreateIdentity(crashed); err != nil || !fresh {
		t.Fatalf("marker without a key: fresh %v, %v", fresh, err)
	}
	// A key without a marker (made before markers existed) has served.
	old := t.TempDir()
	if err := os.Rename(filepath.Join(dir, IdentityFile), filepath.Join(old, IdentityFile)); err != nil {
		t.Fatal(err)
	}
	if k, fresh, err := LoadOrCreateIdentity(old); err != nil || fresh || !k.Equals(k1) {
		t.Fatalf("key without a marker: fresh %v, %v", fresh, err)
	}
	if err := MarkIdentityUsed(filepath.Join(old, "missing")); !errors.Is(err, ErrIdentity) {
		t.Fatalf("MarkIdentityUsed on a missing directory: %v", err)
	}
}

func TestReadPSK(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hexKey := strings.Repeat("0123456789abcdef", 4)
	good := write("good", "/key/swarm/psk/1.0.0/\n/base16/\n"+hexKey+"\n")
	k, err := ReadPSK(good)
	if err != nil || len(k) != 32 || k[0] != 0x01 || k[31] != 0xef {
		t.Fatalf("good key: %x %v", k, err)
	}
	for name, body := range map[string]string{
		"short":      "/key/swarm/psk/1.0.0/\n/base16/\n0123\n",
		"long":       "/key/swarm/psk/1.0.0/\n/base16/\n" + hexKey + "00\n",
		"not hex":    "/key/swarm/psk/1.0.0/\n/base16/\n" + strings.Repeat("zz", 32) + "\n",
		"bad header": "/key/swarm/psk/2.0.0/\n/base16/\n" + hexKey + "\n",
		"bad codec":  "/key/swarm/psk/1.0.0/\n/base99/\n" + hexKey + "\n",
		"empty":      "",
	} {
		if _, err := ReadPSK(write(name, body)); !errors.Is(err, ErrPSK) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	if _, err := ReadPSK(filepath.Join(dir, "missing")); !errors.Is(err, ErrPSK) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

func TestNodeIDOf(t *testing.T) {
	t.Parallel()
	id := idOf(t, newKey(t))
	// The same id parsed again from its text: a stable function of the
	// id, not of the value in memory.
	again, err := peer.Decode(id.String())
	if err != nil {
		t.Fatal(err)
	}
	if NodeIDOf(id) != NodeIDOf(again) || NodeIDOf(id) == 0 {
		t.Fatal("NodeIDOf is not a stable non-zero function")
	}
	if NodeIDOf(id) == NodeIDOf(idOf(t, newKey(t))) {
		t.Fatal("two keys, one node id")
	}
	if NodeIDOf(peer.ID("")) == 0 {
		t.Fatal("zero node id")
	}
}

// TestSecretsMustBePrivate: a key or swarm key file that group or others
// may read or write is refused, and says how to fix it.
func TestSecretsMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := LoadOrCreateIdentity(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, IdentityFile)
	for _, mode := range []os.FileMode{0o640, 0o604, 0o620} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadOrCreateIdentity(dir); !errors.Is(err, ErrOpenFile) || !strings.Contains(err.Error(), "chmod 0600") {
			t.Errorf("identity key of mode %04o: %v, want ErrOpenFile", mode, err)
		}
	}
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateIdentity(dir); err != nil {
		t.Errorf("identity key of mode 0400: %v", err)
	}
	psk := filepath.Join(dir, "swarm.key")
	if err := os.WriteFile(psk, []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+strings.Repeat("0f", 32)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPSK(psk); !errors.Is(err, ErrPSK) || !errors.Is(err, ErrOpenFile) {
		t.Errorf("swarm key of mode 0644: %v", err)
	}
	if err := os.Chmod(psk, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPSK(psk); err != nil {
		t.Errorf("swarm key of mode 0600: %v", err)
	}
}

// TestReachableListen: loopback addresses only are not reachable from
// other machines; every interface, another IP or a name is.
func TestReachableListen(t *testing.T) {
	for _, tc := range []struct {
		addrs []string
		want  string
	}{
		{nil, ""},
		{[]string{"/ip4/127.0.0.1/tcp/0", "/ip6/::1/tcp/4001"}, ""},
		{[]string{"/ip4/127.0.0.1/tcp/0", "/ip4/0.0.0.0/tcp/4001"}, "/ip4/0.0.0.0/tcp/4001"},
		{[]string{"/ip6/::/tcp/4001"}, "/ip6/::/tcp/4001"},
		{[]string{"/ip4/10.0.0.2/tcp/4001"}, "/ip4/10.0.0.2/tcp/4001"},
		{[]string{"/dns4/a.example/tcp/4001"}, "/dns4/a.example/tcp/4001"},
		{[]string{"not a multiaddr"}, ""},
	} {
		if got := ReachableListen(tc.addrs); got != tc.want {
			t.Errorf("ReachableListen(%q) = %q, want %q", tc.addrs, got, tc.want)
		}
	}
}

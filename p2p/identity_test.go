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
	k1, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equals(k2) || idOf(t, k1) != idOf(t, k2) {
		t.Fatal("the identity changed between calls")
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

	if _, err := LoadOrCreateIdentity(""); !errors.Is(err, ErrIdentity) {
		t.Fatalf("empty dir: %v", err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, IdentityFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateIdentity(bad); !errors.Is(err, ErrIdentity) {
		t.Fatalf("garbled key: %v", err)
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
	if NodeIDOf(id) != NodeIDOf(id) || NodeIDOf(id) == 0 {
		t.Fatal("NodeIDOf is not a stable non-zero function")
	}
	if NodeIDOf(id) == NodeIDOf(idOf(t, newKey(t))) {
		t.Fatal("two keys, one node id")
	}
	if NodeIDOf(peer.ID("")) == 0 {
		t.Fatal("zero node id")
	}
}

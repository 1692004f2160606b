package p2p

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/sluicehq/sluice/core/wire"
)

var (
	// ErrIdentity: the identity key file is missing its directory, unreadable or not an Ed25519 key.
	ErrIdentity = errors.New("p2p: bad identity key")
	// ErrPSK: the swarm key file is missing, too short or garbled.
	ErrPSK = errors.New("p2p: bad swarm key")
	// ErrConfig: a Config field is invalid.
	ErrConfig = errors.New("p2p: bad config")
	// ErrUnknownPeer: no such member, or the host is closed.
	ErrUnknownPeer = errors.New("p2p: unknown peer")
)

// IdentityFile is the name of the key file inside the data directory.
const IdentityFile = "identity.key"

// FreshFile marks an identity key that has never served: it is written
// before the key and removed by MarkIdentityUsed.
const FreshFile = "identity.fresh"

// maxKeyFile bounds what ReadPSK and LoadOrCreateIdentity read: both files are tiny.
const maxKeyFile = 4 << 10

// NodeIDOf maps a libp2p peer id to the core's node id: the first 8 bytes
// (big endian) of sha256 of the peer id's bytes; 0 becomes 1, because the
// core reserves 0 for "nobody".
func NodeIDOf(id peer.ID) wire.NodeID {
	sum := sha256.Sum256([]byte(id))
	n := wire.NodeID(binary.BigEndian.Uint64(sum[:8]))
	if n == 0 {
		n = 1
	}
	return n
}

// LoadOrCreateIdentity reads the Ed25519 key at dir/identity.key, creating
// it on first call (file 0600, directory 0700). The file appears atomically
// (temporary file, fsync, rename), so a crash never leaves half a key.
// Concurrent first calls on one directory are not supported: one daemon owns
// a data directory.
//
// fresh reports that the key has never served: this call created it, or
// dir/identity.fresh is still there (MarkIdentityUsed removes it). A
// created key gets the marker before the key itself, so a crash between
// the two leaves a marker and no key, which the next call treats as a
// first start; a key without a marker has served.
func LoadOrCreateIdentity(dir string) (key crypto.PrivKey, fresh bool, err error) {
	if dir == "" {
		return nil, false, fmt.Errorf("%w: no data directory", ErrIdentity)
	}
	path := filepath.Join(dir, IdentityFile)
	data, err := readSmall(path)
	switch {
	case err == nil:
		k, err := crypto.UnmarshalPrivateKey(data)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %s: %w", ErrIdentity, path, err)
		}
		if k.Type() != crypto.Ed25519 {
			return nil, false, fmt.Errorf("%w: %s: key type %v, want Ed25519", ErrIdentity, path, k.Type())
		}
		_, err = os.Lstat(filepath.Join(dir, FreshFile))
		switch {
		case err == nil:
			return k, true, nil
		case errors.Is(err, os.ErrNotExist):
			return k, false, nil
		default:
			return nil, false, fmt.Errorf("%w: %w", ErrIdentity, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, false, fmt.Errorf("%w: %w", ErrIdentity, err)
	}

	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("%w: generate: %w", ErrIdentity, err)
	}
	data, err = crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, false, fmt.Errorf("%w: marshal: %w", ErrIdentity, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrIdentity, err)
	}
	if err := writeAtomic(dir, filepath.Join(dir, FreshFile), nil); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrIdentity, err)
	}
	if err := writeAtomic(dir, path, data); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrIdentity, err)
	}
	return k, true, nil
}

// MarkIdentityUsed records that the key in dir served: from then on
// LoadOrCreateIdentity reports it not fresh, and a store found empty
// means the node lost its state. Call it once the node's store holds the
// identity, before the node answers anyone.
func MarkIdentityUsed(dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: no data directory", ErrIdentity)
	}
	if err := os.Remove(filepath.Join(dir, FreshFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrIdentity, err)
	}
	// The removal is only durable once the directory is synced.
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("%w: %w", ErrIdentity, err)
	}
	return nil
}

func writeAtomic(dir, path string, data []byte) (err error) {
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*") // created 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// The rename is only durable once the directory is synced.
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// readSmall reads a secret: a key file that group or others may read or
// write is refused, as ssh refuses such a private key (its secret may be
// out already; chmod 600 and, if in doubt, make a new one).
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := CheckPrivate(f, path, 0o077); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("%s: over %d bytes", path, maxKeyFile)
	}
	return data, nil
}

// ErrOpenFile: a secret's file is open to more users than its owner.
var ErrOpenFile = errors.New("p2p: secret file open to other users")

// CheckPrivate refuses f, the open file at path, when its permissions have
// any of the bits of others (0o077: group or others; 0o007: others only).
func CheckPrivate(f *os.File, path string, others os.FileMode) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if perm := st.Mode().Perm(); perm&others != 0 {
		return fmt.Errorf("%w: %s has mode %04o: chmod %04o %s", ErrOpenFile, path, perm, perm&^others, path)
	}
	return nil
}

// ReadPSK reads a libp2p swarm key file ("/key/swarm/psk/1.0.0/", an
// encoding line, the key) and returns the 32-byte key.
func ReadPSK(path string) ([]byte, error) {
	data, err := readSmall(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPSK, err)
	}
	// pnet.DecodeV1PSK reads 32 bytes and ignores the rest; a base16 key
	// line of any other length is a typo worth refusing.
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) >= 2 && strings.TrimSpace(lines[1]) == "/base16/" {
		if len(lines) != 3 || len(strings.TrimSpace(lines[2])) != 64 {
			return nil, fmt.Errorf("%w: %s: the key must be one line of 64 hex digits", ErrPSK, path)
		}
	}
	psk, err := pnet.DecodeV1PSK(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrPSK, path, err)
	}
	return psk, nil
}

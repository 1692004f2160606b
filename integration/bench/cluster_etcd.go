package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
	"go.uber.org/zap"
)

// findEtcd is the etcd server binary: /usr/bin/etcd, else etcd on PATH,
// else what `apt-get install -y etcd-server` installs (as root).
func findEtcd(ctx context.Context) (string, error) {
	return findServer(ctx, "etcd", "etcd-server")
}

// etcdVersion is what `etcd --version` says of itself ("3.4.23").
func etcdVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd Version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return strings.TrimSpace(string(out))
}

// tmpfsMagic is the file system type statfs reports for a tmpfs.
const tmpfsMagic = 0x01021994

// etcdCluster is a 3-member etcd cluster on loopback.
type etcdCluster struct {
	storage   storage
	dir       string
	members   []*process
	endpoints []string
}

// startEtcd starts 3 members. Durable members keep their data under the
// system's temporary directory (a disk here), in-memory ones on
// /dev/shm: etcd has no in-memory mode, and a tmpfs makes its fsyncs
// free, the nearest equivalent of sluice's --in-memory.
func startEtcd(ctx context.Context, bin string, st storage, logDir string) (_ *etcdCluster, err error) {
	parent := ""
	if st == memory {
		parent = "/dev/shm"
		var fs syscall.Statfs_t
		if err := syscall.Statfs(parent, &fs); err != nil || fs.Type != tmpfsMagic {
			return nil, fmt.Errorf("etcd in memory needs a tmpfs at %s (statfs: %v, type %#x)", parent, err, fs.Type)
		}
	}
	dir, err := os.MkdirTemp(parent, "etcd-bench-")
	if err != nil {
		return nil, err
	}
	c := &etcdCluster{storage: st, dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	const n = 3
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i+1, ports[n+i]))
		c.endpoints = append(c.endpoints, fmt.Sprintf("127.0.0.1:%d", ports[i]))
	}
	token := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	for i := range n {
		name := fmt.Sprintf("e%d", i+1)
		clientURL := "http://" + c.endpoints[i]
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[n+i])
		p, err := startProcess("etcd "+name, filepath.Join(logDir, fmt.Sprintf("etcd-%s-%s.log", st, name)), bin,
			"--name", name, "--data-dir", filepath.Join(dir, name),
			"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", token, "--logger", "zap", "--log-level", "warn")
		if err != nil {
			return nil, err
		}
		c.members = append(c.members, p)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	err = waitFor(ctx, "etcd "+st.String(), readyTimeout, c.members, func(ctx context.Context) bool {
		for _, ep := range c.endpoints {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			s, err := cli.Status(sctx, ep)
			cancel()
			if err != nil || s.Leader == 0 {
				return false
			}
		}
		return true
	})
	return c, err
}

func (c *etcdCluster) name() string { return "etcd" }

// lockers makes n clients, each with a connection of its own to one
// member (client i to member i%3, as sluice's go to agent i%3) and a
// session (a lease that keeps its locks' keys).
func (c *etcdCluster) lockers(ctx context.Context, n int) ([]locker, error) {
	ls := make([]locker, 0, n)
	for i := range n {
		l, err := newEtcdLocker(ctx, c.endpoints[i%len(c.endpoints)])
		if err != nil {
			for _, l := range ls {
				_ = l.close()
			}
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

func (c *etcdCluster) memory() []memberRSS {
	return rssOf(c.members)
}

// stop stops the members with SIGTERM and removes their data.
func (c *etcdCluster) stop() {
	for _, p := range c.members {
		p.stop()
	}
	if err := os.RemoveAll(c.dir); err != nil {
		logf("removing %s: %v", c.dir, err)
	}
}

// etcdLocker is one benchmark client of etcd: its own client and session.
type etcdLocker struct {
	cli     *clientv3.Client
	s       *concurrency.Session
	aborted atomic.Bool
}

// sessionTTL is the session lease's TTL in seconds: locks of a client
// that vanished go after it.
const sessionTTL = 30

func newEtcdLocker(ctx context.Context, endpoint string) (*etcdLocker, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second,
		Context: ctx, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(sessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdLocker{cli: cli, s: s}, nil
}

// lock is a concurrency.Mutex on name: the usual way to lock with etcd.
func (l *etcdLocker) lock(ctx context.Context, name string) (release, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	m := concurrency.NewMutex(l.s, name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

// read is the recipes' RWMutex RLock. etcd has no try: it waits for
// earlier writers. The recipe takes no context (it uses its own), so
// abort is what ends a stuck call.
func (l *etcdLocker) read(_ context.Context, name string) (release, error) {
	rw := recipe.NewRWMutex(l.s, name)
	if err := rw.RLock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return rw.RUnlock() }, nil
}

// write is the RWMutex's Lock: it waits for the earlier readers and
// holds off later ones, like READ_WRITE_PRIORITY.
func (l *etcdLocker) write(_ context.Context, name string) (release, error) {
	rw := recipe.NewRWMutex(l.s, name)
	if err := rw.Lock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return rw.Unlock() }, nil
}

// abort closes the client: calls without a context of their own (the
// RWMutex's) end with an error.
func (l *etcdLocker) abort() {
	l.aborted.Store(true)
	_ = l.cli.Close()
}

// close revokes the session (its keys go) and closes the client. After
// an abort there is nothing left to close: the lease expires by itself.
func (l *etcdLocker) close() error {
	if l.aborted.Load() {
		return nil
	}
	err := l.s.Close()
	if cerr := l.cli.Close(); err == nil && !errors.Is(cerr, context.Canceled) {
		err = cerr
	}
	return err
}

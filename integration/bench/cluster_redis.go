package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Redis with go-redsync is the reference of the W4 target: "64
// clients on 64 keys", each client locking and unlocking a key of its
// own. It is a single redis-server without persistence, so it runs in the
// memory storage mode only, and only W4.

// findRedis is the redis-server binary: /usr/bin/redis-server, else
// redis-server on PATH, else what `apt-get install -y redis-server`
// installs (as root).
func findRedis(ctx context.Context) (string, error) {
	return findServer(ctx, "redis-server", "redis-server")
}

// redisVersion is what `redis-server --version` says of itself
// ("7.0.15").
func redisVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for f := range strings.FieldsSeq(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(string(out))
}

// redisServer is one redis-server process on loopback.
type redisServer struct {
	dir  string
	addr string
	proc *process
}

// startRedis starts redis-server on a free port of 127.0.0.1 without
// persistence (no RDB snapshots, no AOF: the nearest to sluice's
// --in-memory), its working directory a temporary one so that nothing it
// might write lands in the checkout, its log in logDir.
func startRedis(ctx context.Context, bin, logDir string) (_ *redisServer, err error) {
	dir, err := os.MkdirTemp("", "redis-bench-")
	if err != nil {
		return nil, err
	}
	s := &redisServer{dir: dir}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	s.addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	// --logfile "" is stdout, which startProcess sends to the log file.
	s.proc, err = startProcess("redis-server", filepath.Join(logDir, "redis-memory.log"), bin,
		"--bind", "127.0.0.1", "--port", fmt.Sprint(ports[0]), "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", "", "--daemonize", "no", "--protected-mode", "yes")
	if err != nil {
		return nil, err
	}
	cli := newRedisClient(s.addr)
	defer cli.Close()
	err = waitFor(ctx, "redis", readyTimeout, []*process{s.proc}, func(ctx context.Context) bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return cli.Ping(pctx).Err() == nil
	})
	return s, err
}

func (s *redisServer) name() string { return "redis" }

// lockers makes n clients, each with a go-redis client of its own (as
// each etcd client has its own connection) behind a redsync instance.
func (s *redisServer) lockers(_ context.Context, n int) ([]locker, error) {
	ls := make([]locker, n)
	for i := range ls {
		cli := newRedisClient(s.addr)
		ls[i] = &redisLocker{cli: cli, rs: redsync.New(goredis.NewPool(cli))}
	}
	return ls, nil
}

// newRedisClient is a go-redis client of addr with one connection (a
// benchmark client makes one call at a time), without retries (a failure
// is counted, not hidden), and without maintenance notifications (a
// Redis Enterprise feature a plain redis-server does not have).
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
}

func (s *redisServer) memory() []memberRSS {
	if s.proc == nil {
		return nil
	}
	return rssOf([]*process{s.proc})
}

// stop stops redis-server with SIGTERM (without save points it writes
// nothing) and removes its directory.
func (s *redisServer) stop() {
	if s.proc != nil {
		s.proc.stop()
	}
	if err := os.RemoveAll(s.dir); err != nil {
		logf("removing %s: %v", s.dir, err)
	}
}

// redisLocker is one benchmark client of redis.
type redisLocker struct {
	cli *redis.Client
	rs  *redsync.Redsync
}

// errNoSharedLock: redsync has exclusive locks only; the harness runs
// redis in W4's slot with exclusive locks on a key per client.
var errNoSharedLock = errors.New("redis+redsync: no shared locks")

// lock is a redsync Mutex on name, as its README shows: the lock expires
// after leaseDuration (as sluice's lease), and Lock retries a taken key
// (redsync's default 32 tries, 50 to 250 ms apart), bounded by opTimeout.
func (l *redisLocker) lock(ctx context.Context, name string) (release, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	m := l.rs.NewMutex(name, redsync.WithExpiry(leaseDuration))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock found the key gone or taken")
		}
		return err
	}, nil
}

func (*redisLocker) read(context.Context, string) (release, error)  { return nil, errNoSharedLock }
func (*redisLocker) write(context.Context, string) (release, error) { return nil, errNoSharedLock }

// abort closes the client: a call in flight ends with an error.
func (l *redisLocker) abort() { _ = l.cli.Close() }

func (l *redisLocker) close() error {
	if err := l.cli.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return err
	}
	return nil
}

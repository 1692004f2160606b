package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

var (
	// ErrCorrupt: stored bytes do not parse (bad key or value, unknown version).
	ErrCorrupt = errors.New("store: corrupt data")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrFailed wraps the error of a failed write. It is sticky: after one
	// failure every later Submit fails too, and the node must stop serving.
	ErrFailed = errors.New("store: write failed")
	// ErrLost: the store is empty but the node's identity served before:
	// its votes and lock table are gone, and it must not serve under that
	// identity again.
	ErrLost = errors.New("store: state lost")
	// ErrOtherIdentity: the store was started by another node.
	ErrOtherIdentity = errors.New("store: belongs to another node")
	// ErrNewerFormat: the store was written in a format newer than this
	// build reads, by a newer sluice. Open writes nothing to it.
	ErrNewerFormat = errors.New("store: written by a newer sluice")
	// ErrInUse: another process has the store open (Badger's directory
	// lock): another agent with the same data directory. Open writes
	// nothing to it.
	ErrInUse = errors.New("store: in use by another process")
)

// Format is the store's layout version that this build writes and the
// newest it reads. A store without a format record is format 1, the
// layout of every release so far; this build writes the record only once
// its format is above 1, so that the previous release still opens what
// it wrote (a downgrade by one release). An older store is brought up to
// Format by migrations, in the transaction that bumps the incarnation:
// a crash mid-migration leaves the old format whole, migrated again at the
// next start.
const Format = 1

// migrations[f] changes a store of format f into format f+1, in txn.
// formatNow is Format, but for the tests of migrations.
var (
	migrations = map[uint64]func(txn *badger.Txn) error{}
	formatNow  = uint64(Format)
)

// defaultMaxBatch is Config.MaxBatch when it is zero or less.
const defaultMaxBatch = 4096

// Config configures a Store.
type Config struct {
	// Dir is the data directory; Badger's files go in Dir/badger. Required
	// unless InMemory.
	Dir string
	// InMemory keeps everything in memory (dev and tests): Dir is ignored,
	// nothing is written to disk and nothing survives Close.
	InMemory bool
	// Logger receives the store's and Badger's messages (Badger's at Warn
	// and Error only). Default: discard.
	Logger *slog.Logger
	// MaxBatch caps the writes of the batches merged into one transaction;
	// default 4096. A single larger batch is still taken whole. Badger's
	// own transaction limit also applies (see the package comment).
	MaxBatch int
	// MinFree is the free space, in bytes, the store keeps on its file
	// system: below it every write fails (sticky ErrFailed) and the node
	// stops serving. Badger writes its log through a memory map and dies of
	// SIGBUS when the disk fills, instead of returning an error, so the
	// store stops first. Default 64 MiB; negative turns the check off.
	MinFree int64
	// Identity is the node id this store belongs to (0: not checked).
	// A store records the identity of its first start and refuses another.
	Identity uint64
	// Fresh allows a store with no state at all to be initialised: the
	// node's identity was made for this start (or by `sluice id`) and has
	// never served. Without it, an empty store means the node's state was
	// lost while its identity key stayed: Open refuses with ErrLost.
	// In-memory stores are always fresh.
	Fresh bool
	// LazyDelay is how long a lazy batch (Batch.Lazy) may wait for a
	// batch that is not to share its commit, and so its fsync; default
	// 5 ms, negative: none (every batch commits as soon as the writer can).
	LazyDelay time.Duration
	// ObserveCommit, when set, is called by the writer after every
	// transaction that made something durable, with how long its commit
	// took (Badger's write and, on disk, its fsync): the disk as the
	// leaders' answers wait for it, which operators watch as etcd's WAL
	// fsync histogram. It must not block.
	ObserveCommit func(time.Duration)
}

// defaultLazyDelay is Config.LazyDelay when it is zero: about two lock
// cycles of one client, so a released ticket's tombstone goes with the
// next ticket's commit instead of an fsync of its own.
const defaultLazyDelay = 5 * time.Millisecond

// State is what Open and Load find.
type State struct {
	Durable *core.Durable // never nil
	// Election is nil if it was never persisted.
	Election *ElectionRecord
	// Incarnation: from Open, the new incarnation (1 on a first start);
	// from Load, the stored one.
	Incarnation uint32
	// Identity is the node id the store belongs to (0: none recorded).
	Identity uint64
	// Age counts the transactions that changed the store: how far it got.
	// A copy restored from a backup is younger than what the node told
	// its peers (see election.Config.StoreAge).
	Age uint64
}

// Batch is one unit of Submit: writes applied in order, and the election's
// record if it changed.
type Batch struct {
	Writes   []core.Write
	Election *ElectionRecord // nil: unchanged
	// Lazy: nothing waits on this batch but its own answer (every write
	// is core.Write.Lazy, and no election record): the writer may hold it
	// up to Config.LazyDelay for another batch to commit with, in order.
	Lazy bool
}

// ElectionRecord is the election's persistent state ("m:election"). Its
// fields are election.Persisted's, field for field: the daemon converts one
// into the other, a conversion that stops compiling if they part. The
// store keeps its own type because the election sits above it.
type ElectionRecord struct {
	Cluster   uint64
	Bootstrap []wire.NodeID
	Promised  uint64
	Accepted  wire.View
	Valid     wire.View
	Lives     map[wire.NodeID]wire.Life
	Confirmed wire.Life
	Since     []wire.Life
	Writes    uint64
}

// Stats counts the writer's work.
type Stats struct {
	Batches uint64 // batches made durable
	Writes  uint64 // writes made durable
	// Syncs counts committed Badger transactions that changed something:
	// each is one synced write on disk (none in memory; batches that
	// change nothing commit without one). Batches/Syncs is the
	// group-commit factor.
	Syncs uint64
	// Failures counts batches answered with an ErrFailed error, including
	// those refused after the first failure.
	Failures  uint64
	LastError string
}

// Store is the Badger-backed durable state of one node. Its methods are safe
// for concurrent use.
type Store struct {
	db       *badger.DB
	log      *slog.Logger
	path     string
	maxBatch int
	// lazyDelay: see Config.LazyDelay.
	lazyDelay time.Duration
	// observe: Config.ObserveCommit.
	observe func(time.Duration)
	// wal syncs Badger's log after each commit (nil in memory, and where
	// Badger syncs its own writes).
	wal *walSync

	minFree int64 // 0: no check (in memory, or turned off)
	// freeSpace reports the bytes available under path; tests replace it.
	freeSpace func(path string) (int64, error)

	mu      sync.Mutex
	queue   []request
	closing bool
	failed  error // sticky write failure
	stats   Stats
	age     uint64        // durable: of the last committed transaction
	wake    chan struct{} // cap 1: the queue or closing changed
	done    chan struct{} // closed when the writer exits

	// unchecked counts the writes since the levels were last looked at
	// (the writer's own); compact (cap 1) wakes compactLoop, which closes
	// compacted when it returns.
	unchecked int
	compact   chan struct{}
	compacted chan struct{}

	// dbMu keeps Close from closing Badger under a Load or Snapshot: Badger
	// panics when a transaction is used after DB.Close.
	dbMu      sync.RWMutex
	dbClosed  bool
	closeOnce sync.Once
	closeErr  error
}

type request struct {
	b  Batch
	ch chan error
	at time.Time // when it was submitted
}

// Open opens the store (creating Dir), loads it, checks that it belongs to
// Config.Identity (ErrOtherIdentity, ErrLost), and durably bumps the
// incarnation. The returned State carries the new incarnation.
func Open(ctx context.Context, cfg Config) (*Store, State, error) {
	if err := ctx.Err(); err != nil {
		return nil, State{}, err
	}
	cfg = withDefaults(cfg)
	path := "(in memory)"
	if !cfg.InMemory {
		var err error
		if path, err = prepareDir(cfg.Dir, cfg.MinFree); err != nil {
			return nil, State{}, err
		}
	}
	db, err := openBadger(badgerOptions(cfg, path), path)
	if err != nil {
		return nil, State{}, err
	}
	var wal *walSync
	if !cfg.InMemory {
		if wal, err = openWALSync(path); err != nil {
			_ = db.Close()
			return nil, State{}, err
		}
	}
	st, err := bump(db, cfg.Identity, cfg.Fresh || cfg.InMemory)
	if err == nil && wal != nil {
		err = wal.sync()
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		if wal != nil {
			_ = wal.close()
		}
		_ = db.Close()
		return nil, State{}, fmt.Errorf("store: open %s: %w", path, err)
	}
	s := &Store{
		db:        db,
		log:       cfg.Logger,
		path:      path,
		maxBatch:  cfg.MaxBatch,
		lazyDelay: cfg.LazyDelay,
		observe:   cfg.ObserveCommit,
		wal:       wal,
		minFree:   cfg.MinFree,
		freeSpace: freeSpace,
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		compact:   make(chan struct{}, 1),
		compacted: make(chan struct{}),
		age:       st.Age,
	}
	go s.run()
	go s.compactLoop()
	s.compact <- struct{}{} // a store written by a crashed node may need it now
	s.log.Info("store opened", "path", path, "identity", st.Identity, "incarnation", st.Incarnation,
		"names", len(st.Durable.HighWater), "fence", st.Durable.Fence, "complete", st.Durable.Complete)
	return s, st, nil
}

// withDefaults fills in Logger, MaxBatch, MinFree and LazyDelay; in memory
// MinFree is 0, no check: there is no disk to fill.
func withDefaults(cfg Config) Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = defaultMaxBatch
	}
	if cfg.MinFree == 0 {
		cfg.MinFree = defaultMinFree
	}
	if cfg.LazyDelay == 0 {
		cfg.LazyDelay = defaultLazyDelay
	}
	if cfg.InMemory {
		cfg.MinFree = 0
	}
	return cfg
}

// prepareDir creates Badger's directory under dir and returns it. It
// refuses a disk with less than minFree bytes free (minFree > 0): Badger
// would die of SIGBUS filling it (see Config.MinFree).
func prepareDir(dir string, minFree int64) (string, error) {
	if dir == "" {
		return "", errors.New("store: Config.Dir is required unless InMemory")
	}
	path := filepath.Join(dir, "badger")
	if err := os.MkdirAll(path, 0o700); err != nil {
		return "", fmt.Errorf("store: open %s: %w", path, err)
	}
	if minFree > 0 {
		if free, err := freeSpace(path); err == nil && free >= 0 && free < minFree {
			return "", fmt.Errorf("%w: %s: disk nearly full: %d bytes free, the store keeps %d free",
				ErrFailed, path, free, minFree)
		}
	}
	return path, nil
}

// memTableSize is Badger's memtable size (tests make it small).
var memTableSize int64 = 16 << 20

// badgerOptions are Badger's options for the store at path.
func badgerOptions(cfg Config, path string) badger.Options {
	var opts badger.Options
	if cfg.InMemory {
		opts = badger.DefaultOptions("").WithInMemory(true)
	} else {
		// On Linux the writer syncs Badger's log itself (walSync).
		opts = badger.DefaultOptions(path).WithSyncWrites(!walSyncSupported)
	}
	return opts.WithLogger(badgerLogger{cfg.Logger}).
		// One writer goroutine does every update: nothing can conflict.
		WithDetectConflicts(false).
		// The lock table is small: 16 MiB memtables (default 64), at most
		// two waiting for their flush (default 5), bound memory and
		// restart replay, and still fit thousands of writes per
		// transaction (Badger allows 15% of a memtable).
		WithMemTableSize(memTableSize).
		WithNumMemtables(2).
		// Badger's compactors poll the levels 20 times a second each:
		// on an idle agent two of them cost 0.46 % of a core, half of
		// what the whole agent may. The store compacts when its writes
		// may have made tables instead (compactLoop).
		WithNumCompactors(0).
		// Values are tiny and all stay in the LSM tree (below
		// ValueThreshold); the value log file, mapped at twice its size,
		// need not be the default 1 GiB. Tables of tiny keys gain little
		// from compression, and uncompressed blocks need no block cache.
		WithValueLogFileSize(16 << 20).
		WithCompression(options.None).
		WithBlockCacheSize(8 << 20)
}

// openBadger turns a Badger panic on a damaged directory into an error:
// some of its checks of the files it reads are assertions. (A panic in one
// of Badger's own goroutines, as on a garbage table file, still crashes
// the process: nothing outside Badger can recover it.)
func openBadger(opts badger.Options, path string) (db *badger.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("%w: open %s: badger panicked: %v", ErrCorrupt, path, r)
		}
	}()
	db, err = badger.Open(opts)
	if err != nil && lockedByOther(err) {
		return nil, fmt.Errorf("%w: %s (another sluice agent with this data directory?)", ErrInUse, path)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return db, nil
}

// lockedByOther: err is Badger's refusal of a directory another process
// holds (its directory lock). Badger keeps no error value for it, only
// this text on every system (its own tests check it), and wraps the
// system's error as text.
func lockedByOther(err error) bool {
	return strings.Contains(err.Error(), "Another process is using this Badger database")
}

// bump loads everything, checks the store belongs to node id, records id
// if no identity is, and stores incarnation+1, in one transaction whose
// commit is synced. A refusal writes nothing.
func bump(db *badger.DB, id uint64, fresh bool) (State, error) {
	var st State
	err := db.Update(func(txn *badger.Txn) error {
		// The format first: a newer one may hold keys load would call
		// corrupt.
		format, err := storedFormat(txn)
		if err != nil {
			return err
		}
		if format > formatNow {
			return fmt.Errorf("%w: its format is %d, this build reads formats 1 to %d: "+
				"run the release that wrote it, or a newer one", ErrNewerFormat, format, formatNow)
		}
		for ; format < formatNow; format++ {
			if err := migrations[format](txn); err != nil {
				return fmt.Errorf("store: migrating format %d to %d: %w", format, format+1, err)
			}
			if err := txn.Set(keyFormat, encodeUint(format+1)); err != nil {
				return err
			}
		}
		if st, err = load(txn); err != nil {
			return err
		}
		_, err = txn.Get(keyInc)
		empty := errors.Is(err, badger.ErrKeyNotFound)
		if err != nil && !empty {
			return err
		}
		switch {
		case empty && id != 0 && !fresh:
			// Starting afresh would let this node vote again without
			// the promises it made: it could help elect two views of
			// one epoch.
			return fmt.Errorf("%w: the identity key (node %d) was used before, but the store is empty: "+
				"the node's votes and lock table are lost, and it must not serve as node %d again. "+
				"Follow the manual's runbook 'A node lost its disk' (cmd/sluice/MANUAL.md): move identity.key away, start the node "+
				"again with --join, then run `sluice members remove OLD` and `sluice members add NEW` (OLD is %d)",
				ErrLost, id, id, id)
		case st.Identity != 0 && id != 0 && st.Identity != id:
			return fmt.Errorf("%w: the store belongs to node %d, this node is %d", ErrOtherIdentity, st.Identity, id)
		case st.Identity == 0 && id != 0:
			// A first start, or a store of a version without identities.
			st.Identity = id
			if err := txn.Set(keyIdentity, encodeUint(id)); err != nil {
				return err
			}
		}
		if st.Incarnation == math.MaxUint32 {
			return errors.New("incarnation counter exhausted")
		}
		st.Incarnation++
		st.Age++
		if err := txn.Set(keyAge, encodeUint(st.Age)); err != nil {
			return err
		}
		return txn.Set(keyInc, encodeUint(uint64(st.Incarnation)))
	})
	return st, err
}

// storedFormat is the store's format: its record, or 1 without one.
func storedFormat(txn *badger.Txn) (uint64, error) {
	item, err := txn.Get(keyFormat)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	var f uint64
	if err := item.Value(func(v []byte) error { return decodeInto(&f, keyFormat, v) }); err != nil {
		return 0, err
	}
	if f == 0 {
		return 0, corrupt(keyFormat, "format 0")
	}
	return f, nil
}

// load reads the whole store in txn. Every key must be one of the layout.
func load(txn *badger.Txn) (State, error) {
	st := State{Durable: core.NewDurable()}
	d := st.Durable
	it := txn.NewIterator(badger.DefaultIteratorOptions)
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		err := item.Value(func(v []byte) error {
			switch {
			case len(k) > 0 && k[0] == prefixName:
				e, err := decodeNameEntry(k, v)
				if err != nil {
					return err
				}
				if e.high {
					d.HighWater[e.name] = e.value
					return nil
				}
				t := d.Tickets[e.name]
				if t == nil {
					t = map[wire.RequestID]core.DurableTicket{}
					d.Tickets[e.name] = t
				}
				t[e.req] = e.ticket
			case len(k) > 0 && k[0] == prefixLed:
				view, err := decodeLed(k, v)
				if err != nil {
					return err
				}
				d.Led[view.Epoch] = view
			case string(k) == string(keyFence):
				return decodeInto(&d.Fence, k, v)
			case string(k) == string(keyComplete):
				return decodeInto(&d.Complete, k, v)
			case string(k) == string(keyFloor):
				return decodeInto(&d.Floor, k, v)
			case string(k) == string(keyInc):
				inc, err := decodeInc(k, v)
				st.Incarnation = inc
				return err
			case string(k) == string(keyIdentity):
				return decodeInto(&st.Identity, k, v)
			case string(k) == string(keyAge):
				return decodeInto(&st.Age, k, v)
			case string(k) == string(keyElection):
				p, err := decodeElection(k, v)
				st.Election = p
				return err
			case string(k) == string(keyFormat):
				return nil // read before, by storedFormat
			default:
				return corrupt(k, "unknown key")
			}
			return nil
		})
		if err != nil {
			return State{}, err
		}
	}
	return st, nil
}

func decodeInto(dst *uint64, k, v []byte) error {
	x, err := decodeUint(k, v)
	*dst = x
	return err
}

// Submit queues b and returns a channel that receives nil once b is durable,
// or an error (wrapping ErrFailed or ErrClosed). Batches become durable in
// Submit order. Submit never blocks. It copies b's slices; the views,
// bootstrap members and lives inside must not change until the answer
// arrives.
func (s *Store) Submit(b Batch) <-chan error {
	ch := make(chan error, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing:
		ch <- ErrClosed
		return ch
	case s.failed != nil:
		s.stats.Failures++
		ch <- s.failed
		return ch
	}
	b.Writes = slices.Clone(b.Writes)
	if b.Election != nil {
		p := *b.Election
		b.Election = &p
	}
	s.queue = append(s.queue, request{b: b, ch: ch, at: time.Now()})
	s.poke()
	return ch
}

// lazyWait is how long the writer waits before it commits what is
// queued: 0 now (a batch that is not lazy, a full batch's worth, a lazy
// one held long enough, or a close), negative for a wake-up (nothing
// queued). Called with mu held.
func (s *Store) lazyWait() time.Duration {
	if s.closing {
		return 0
	}
	if len(s.queue) == 0 {
		return -1
	}
	writes := 0
	for _, r := range s.queue {
		if !r.b.Lazy || r.b.Election != nil {
			return 0
		}
		writes += len(r.b.Writes)
	}
	if s.lazyDelay <= 0 || writes >= s.maxBatch {
		return 0
	}
	return max(time.Until(s.queue[0].at.Add(s.lazyDelay)), 0)
}

func (s *Store) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run is the writer: it commits queued batches, merged, until Close and an
// empty queue.
func (s *Store) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		s.mu.Lock()
		for {
			wait := s.lazyWait()
			if wait == 0 {
				break
			}
			s.mu.Unlock()
			if wait < 0 {
				<-s.wake
			} else {
				timer.Reset(wait)
				select {
				case <-s.wake:
				case <-timer.C:
				}
				timer.Stop()
			}
			s.mu.Lock()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		n, writes := 1, len(s.queue[0].b.Writes)
		for n < len(s.queue) && writes+len(s.queue[n].b.Writes) <= s.maxBatch {
			writes += len(s.queue[n].b.Writes)
			n++
		}
		group := slices.Clone(s.queue[:n])
		clear(s.queue[:n]) // let the batches be collected
		s.queue = s.queue[n:]
		failed := s.failed
		s.mu.Unlock()
		if failed != nil {
			s.answer(group, failed)
			continue
		}
		s.write(group)
	}
}

// write commits group, in as few transactions as Badger allows, and answers
// each batch once its transaction committed.
func (s *Store) write(group []request) {
	for len(group) > 0 {
		n, err := 0, s.checkFree()
		if err == nil {
			n, err = s.commitPrefix(group)
		}
		if err != nil {
			err = fmt.Errorf("%w: %s: %w", ErrFailed, s.path, err)
			s.log.Error("store write failed; every later write fails too", "err", err)
			s.mu.Lock()
			s.failed = err
			s.mu.Unlock()
			s.answer(group, err)
			return
		}
		s.answer(group[:n], nil)
		for _, r := range group[:n] {
			s.unchecked += len(r.b.Writes) + 1
		}
		group = group[n:]
		if s.unchecked >= compactCheckWrites {
			s.unchecked = 0
			select {
			case s.compact <- struct{}{}:
			default: // looking already
			}
		}
	}
}

// compactCheckWrites is how many writes (a ticket, a tombstone, an
// election record: tens to hundreds of bytes each) go between two looks
// at the levels: a memtable (16 MiB) becomes a level-0 table only after
// tens of thousands, and Badger stalls writes at 15 such tables.
const compactCheckWrites = 4096

// compactLoop compacts the tree when the writer says enough was written
// since it last looked, as Badger's compactors would (a level over its
// target: level 0 at 5 tables), into one level (Flatten: the lock table
// is small). It stops when the writer has, before Badger closes.
func (s *Store) compactLoop() {
	defer close(s.compacted)
	for {
		select {
		case <-s.done:
			return
		case <-s.compact:
		}
		if !s.needsCompaction() {
			continue
		}
		if err := s.db.Flatten(1); err != nil {
			s.log.Warn("store compaction failed; tried again after more writes", "path", s.path, "err", err)
		}
	}
}

// needsCompaction reports whether a level is over its target.
func (s *Store) needsCompaction() bool {
	for _, l := range s.db.Levels() {
		if l.Score >= 1 {
			return true
		}
	}
	return false
}

func (s *Store) answer(group []request, err error) {
	s.mu.Lock()
	for _, r := range group {
		if err != nil {
			s.stats.Failures++
			s.stats.LastError = err.Error()
		} else {
			s.stats.Batches++
			s.stats.Writes += uint64(len(r.b.Writes))
		}
	}
	s.mu.Unlock()
	for _, r := range group {
		r.ch <- err
	}
}

// defaultMinFree is Config.MinFree when it is zero.
const defaultMinFree = 64 << 20

// checkFree refuses to write when the file system is nearly full.
func (s *Store) checkFree() error {
	if s.minFree <= 0 {
		return nil
	}
	free, err := s.freeSpace(s.path)
	if err != nil {
		return fmt.Errorf("free space: %w", err)
	}
	if free >= 0 && free < s.minFree {
		return fmt.Errorf("disk nearly full: %d bytes free, the store keeps %d free", free, s.minFree)
	}
	return nil
}

// commitPrefix commits the longest prefix of group that fits one Badger
// transaction, and returns its length.
func (s *Store) commitPrefix(group []request) (int, error) {
	txn, n, err := s.fit(len(group), func(txn *writeTxn, i int) error {
		return applyBatch(txn, &group[i].b)
	})
	switch {
	case errors.Is(err, badger.ErrTxnTooBig):
		// group[0] alone is too big: it cannot be atomic.
		return 1, s.writeSplit(&group[0].b)
	case err != nil:
		return 0, err
	}
	return n, s.commit(txn)
}

// writeSplit commits a batch too big for one transaction in several, in
// order.
func (s *Store) writeSplit(b *Batch) error {
	units := len(b.Writes)
	if b.Election != nil {
		units++
	}
	s.log.Warn("store batch too big for one transaction; splitting it", "writes", len(b.Writes))
	for k := 0; k < units; {
		txn, n, err := s.fit(units-k, func(txn *writeTxn, i int) error {
			if k+i < len(b.Writes) {
				return applyWrite(txn, &b.Writes[k+i])
			}
			return txn.Set(keyElection, encodeElection(b.Election))
		})
		if err != nil {
			return err // also ErrTxnTooBig: one write alone is too big
		}
		if err := s.commit(txn); err != nil {
			return err
		}
		k += n
	}
	return nil
}

// fit applies units 0..n-1 to a new transaction until one does not fit, and
// returns the transaction holding the units that do. It fails with
// ErrTxnTooBig only when unit 0 alone does not fit.
func (s *Store) fit(n int, apply func(*writeTxn, int) error) (*writeTxn, int, error) {
	// Badger blocks or panics on transactions of a closed DB. Only Close
	// closes it, after the writer stopped, but a test closes it underneath.
	if s.db.IsClosed() {
		return nil, 0, badger.ErrDBClosed
	}
	t := s.newTxn()
	for i := range n {
		err := apply(t, i)
		if err == nil {
			continue
		}
		t.Discard()
		if !errors.Is(err, badger.ErrTxnTooBig) || i == 0 {
			return nil, 0, err
		}
		// Unit i left part of its writes in t: redo the units before it
		// in a fresh transaction. They fit again: same start, same writes.
		t = s.newTxn()
		for j := range i {
			if err := apply(t, j); err != nil {
				t.Discard()
				return nil, 0, err
			}
		}
		return t, i, nil
	}
	return t, n, nil
}

// newTxn opens a write transaction that also counts the store's age: the
// age is written first, so every transaction that fits holds it too.
func (s *Store) newTxn() *writeTxn {
	t := &writeTxn{Txn: s.db.NewTransaction(true)}
	s.mu.Lock()
	age := s.age + 1
	s.mu.Unlock()
	t.setErr = t.Txn.Set(keyAge, encodeUint(age)) // not a change of its own
	return t
}

func (s *Store) commit(t *writeTxn) error {
	if t.changes == 0 {
		t.Discard() // nothing to make durable, no age to count
		return nil
	}
	if t.setErr != nil {
		t.Discard()
		return t.setErr
	}
	start := time.Now()
	if err := t.Commit(); err != nil {
		return err
	}
	if s.wal != nil {
		if err := s.wal.sync(); err != nil {
			return err
		}
	}
	if s.observe != nil {
		s.observe(time.Since(start))
	}
	s.mu.Lock()
	s.stats.Syncs++
	s.age++
	s.mu.Unlock()
	return nil
}

// Age is the store's durable age (see State.Age).
func (s *Store) Age() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.age
}

// Load reads the whole store in one read transaction. Incarnation is the
// stored one.
func (s *Store) Load() (State, error) {
	var st State
	err := s.view(func(txn *badger.Txn) error {
		var err error
		st, err = load(txn)
		return err
	})
	return st, err
}

// Snapshot calls fn for every name of the lock table, in name order, from
// one consistent read transaction: its high-water mark (0 if none) and its
// tickets and tombstones (core.WriteTomb) in request id order. It returns
// the floor (core.Durable.Floor) of the same read. An error from fn stops
// it and is returned. Close waits for a running Snapshot.
func (s *Store) Snapshot(fn func(name string, highWater uint64, tickets []core.DurableTicket) error) (uint64, error) {
	var floor uint64
	err := s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(keyFloor)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			if err := item.Value(func(v []byte) error { return decodeInto(&floor, keyFloor, v) }); err != nil {
				return err
			}
		}
		return snapshotNames(txn, fn)
	})
	return floor, err
}

func snapshotNames(txn *badger.Txn, fn func(name string, highWater uint64, tickets []core.DurableTicket) error) error {
	opts := badger.DefaultIteratorOptions
	opts.Prefix = namePrefix
	it := txn.NewIterator(opts)
	defer it.Close()
	var (
		cur     string
		high    uint64
		tickets []core.DurableTicket
		have    bool
	)
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		var e nameEntry
		err := item.Value(func(v []byte) error {
			var err error
			e, err = decodeNameEntry(item.Key(), v)
			return err
		})
		if err != nil {
			return err
		}
		if have && e.name != cur {
			if err := fn(cur, high, tickets); err != nil {
				return err
			}
			high, tickets = 0, nil
		}
		cur, have = e.name, true
		if e.high {
			high = e.value
		} else {
			tickets = append(tickets, e.ticket)
		}
	}
	if have {
		return fn(cur, high, tickets)
	}
	return nil
}

func (s *Store) view(fn func(*badger.Txn) error) error {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	if s.dbClosed {
		return ErrClosed
	}
	return s.db.View(fn)
}

// Stats returns the writer's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Close answers every queued batch (committed or failed), stops the writer
// and closes Badger. Later calls return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.poke()
		s.mu.Unlock()
		<-s.done
		<-s.compacted
		s.dbMu.Lock()
		s.dbClosed = true
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("store: close %s: %w", s.path, err)
		}
		if s.wal != nil {
			_ = s.wal.close()
		}
		s.dbMu.Unlock()
	})
	return s.closeErr
}

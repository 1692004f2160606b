package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// childEnv makes the test binary a child that opens the store in the
// directory it names and reports the outcome (see openInChild).
const childEnv = "SLUICE_STORE_TEST_OPEN"

func TestMain(m *testing.M) {
	if dir, ok := os.LookupEnv(childEnv); ok {
		s, _, err := Open(context.Background(), Config{Dir: dir})
		if err != nil {
			fmt.Printf("refused (in use: %t): %v\n", errors.Is(err, ErrInUse), err)
			os.Exit(0)
		}
		fmt.Printf("accepted, close: %v\n", s.Close())
		os.Exit(0)
	}
	// No ignores: after Close no Badger goroutine is left but ristretto's
	// cache loop, which exits a moment later (goleak retries). A failed
	// badger.Open does leak goroutines (its cleanup misses some), so the
	// tests that expect one run it in a child process.
	goleak.VerifyTestMain(m)
}

func open(t testing.TB, cfg Config) (*Store, State) {
	t.Helper()
	s, st, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s, st
}

func wait(t testing.TB, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Submit answer did not arrive")
		return nil
	}
}

// names exercise the key escaping: 0x00 in every position, 0xFF after it,
// the terminator's bytes, prefixes of each other, unicode, 1 KiB.
var names = []string{"", "a", "a\x00", "a\x00b", "\x00", "\x00\xff", "\x00\x01", "a\x00\x01", "ab", "ü名\x00🔒", strings.Repeat("z\x00", 512)}

// reqs is a small pool, so that renewals and deletes meet stored tickets.
var reqs = []wire.RequestID{{Node: 0, Seq: 0}, {Node: 1, Seq: 1<<32 | 7}, {Node: 1, Seq: 2 << 32}, {Node: math.MaxUint64, Seq: math.MaxUint64}}

func randView(r *rand.Rand) wire.View {
	v := wire.View{Epoch: r.Uint64N(12), PrevEpoch: r.Uint64N(12)}
	v.Leaders = randNodes(r)
	v.PrevLeaders = randNodes(r)
	return v
}

func randNodes(r *rand.Rand) []wire.NodeID {
	switch n := r.IntN(5); n {
	case 0:
		return nil
	case 1:
		return []wire.NodeID{} // loads as nil: compared normalized
	default:
		ids := make([]wire.NodeID, n-1)
		for i := range ids {
			ids[i] = wire.NodeID(r.Uint64() >> r.IntN(64))
		}
		return ids
	}
}

func randWrite(r *rand.Rand) core.Write {
	w := core.Write{
		Kind: core.WriteKind(1 + r.IntN(int(core.WriteFloor))),
		Name: names[r.IntN(len(names))],
		Entry: wire.Entry{
			Req:    reqs[r.IntN(len(reqs))],
			Ticket: r.Uint64N(20),
			Mode:   wire.Mode(r.IntN(8)),
			State:  wire.EntryState(r.IntN(5)),
			Active: r.IntN(2) == 0,
		},
		Lifetime: r.Int64N(1<<40) - 1<<39,
		Epoch:    r.Uint64N(12),
		View:     randView(r),
	}
	switch r.IntN(40) {
	case 0:
		w.Kind = 0 // unknown kinds change nothing
	case 1:
		w.Kind = 99
	case 2:
		w.Entry.Ticket = math.MaxUint64
	case 3:
		w.Lifetime = math.MinInt64
	}
	return w
}

func randElection(r *rand.Rand) *ElectionRecord {
	p := &ElectionRecord{Cluster: r.Uint64() >> r.IntN(64), Bootstrap: randNodes(r), Promised: r.Uint64()}
	a, v := randView(r), randView(r)
	p.Accepted = wire.View{Epoch: a.Epoch, Leaders: a.Leaders, PrevEpoch: a.PrevEpoch, PrevLeaders: a.PrevLeaders,
		Members: randNodes(r), PrevMembers: randNodes(r)}
	p.Valid = wire.View{Epoch: v.Epoch, Leaders: v.Leaders, PrevEpoch: v.PrevEpoch, PrevLeaders: v.PrevLeaders,
		Members: randNodes(r), PrevMembers: randNodes(r)}
	if r.IntN(2) == 0 { // a cluster whose codec moved: the record of version 4
		p.Accepted.Level, p.Valid.Level = uint64(r.IntN(2))*4, 4
	}
	switch n := r.IntN(6); n {
	case 0:
	case 1:
		p.Lives = map[wire.NodeID]wire.Life{} // loads as nil: compared normalized
	default:
		p.Lives = map[wire.NodeID]wire.Life{}
		for range n {
			id := wire.NodeID(r.Uint64() >> r.IntN(64))
			p.Lives[id] = wire.Life{Incarnation: r.Uint32() >> r.IntN(32), Nonce: r.Uint64() >> r.IntN(64)}
		}
		if r.IntN(4) == 0 { // the extremes
			p.Lives[0] = wire.Life{}
			p.Lives[math.MaxUint64] = wire.Life{Incarnation: math.MaxUint32, Nonce: math.MaxUint64}
		}
	}
	p.Confirmed = wire.Life{Incarnation: r.Uint32() >> r.IntN(32), Nonce: r.Uint64() >> r.IntN(64)}
	for range r.IntN(4) {
		p.Since = append(p.Since, wire.Life{Incarnation: r.Uint32() >> r.IntN(32), Nonce: r.Uint64() >> r.IntN(64)})
	}
	p.Writes = r.Uint64() >> r.IntN(64)
	return p
}

// normal makes empty leader lists nil: the store does not keep the
// difference, and no reader of a view can see it.
func normal(d *core.Durable) *core.Durable {
	c := d.Clone()
	for e, v := range c.Led {
		c.Led[e] = wire.View{Epoch: v.Epoch, Leaders: nilEmpty(v.Leaders), PrevEpoch: v.PrevEpoch, PrevLeaders: nilEmpty(v.PrevLeaders)}
	}
	return c
}

func normalElection(p *ElectionRecord) *ElectionRecord {
	if p == nil {
		return nil
	}
	c := *p
	c.Bootstrap = nilEmpty(c.Bootstrap)
	for _, v := range []*wire.View{&c.Accepted, &c.Valid} {
		v.Leaders, v.PrevLeaders = nilEmpty(v.Leaders), nilEmpty(v.PrevLeaders)
		v.Members, v.PrevMembers = nilEmpty(v.Members), nilEmpty(v.PrevMembers)
	}
	if len(c.Lives) == 0 {
		c.Lives = nil
	}
	return &c
}

func nilEmpty(ids []wire.NodeID) []wire.NodeID {
	if len(ids) == 0 {
		return nil
	}
	return slices.Clone(ids)
}

func checkState(t *testing.T, what string, got State, want *core.Durable, wantElection *ElectionRecord, wantInc uint32) {
	t.Helper()
	if !reflect.DeepEqual(normal(got.Durable), normal(want)) {
		t.Fatalf("%s: durable state differs\n got: %+v\nwant: %+v", what, got.Durable, want)
	}
	if !reflect.DeepEqual(normalElection(got.Election), normalElection(wantElection)) {
		t.Fatalf("%s: election differs\n got: %+v\nwant: %+v", what, got.Election, wantElection)
	}
	if got.Incarnation != wantInc {
		t.Fatalf("%s: incarnation %d, want %d", what, got.Incarnation, wantInc)
	}
}

type snapName struct {
	Name    string
	High    uint64
	Tickets []core.DurableTicket
}

// snapshot is the store's snapshot, its floor as a first entry named
// "floor" with no tickets (a name of the table has tickets or a mark).
func snapshot(t *testing.T, s *Store) []snapName {
	t.Helper()
	var got []snapName
	floor, err := s.Snapshot(func(name string, high uint64, tickets []core.DurableTicket) error {
		got = append(got, snapName{name, high, tickets})
		return nil
	})
	got = append([]snapName{{Name: "floor", High: floor}}, got...)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return got
}

// wantSnapshot is the reference table in name order, tickets in request order.
func wantSnapshot(d *core.Durable) []snapName {
	all := maps.Clone(d.HighWater)
	for name := range d.Tickets {
		all[name] = d.HighWater[name]
	}
	want := []snapName{{Name: "floor", High: d.Floor}}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		sn := snapName{Name: name, High: all[name]}
		for _, req := range slices.SortedFunc(maps.Keys(d.Tickets[name]), wire.RequestID.Compare) {
			sn.Tickets = append(sn.Tickets, d.Tickets[name][req])
		}
		want = append(want, sn)
	}
	return want
}

// TestMatchesDurableApply: random writes of every kind, submitted in random
// batches, leave after every restart exactly what core.Durable.Apply makes
// of them, in Load and in Snapshot, and each Open adds one incarnation.
func TestMatchesDurableApply(t *testing.T) {
	const seeds, rounds = 24, 12 // 288 sequences, each ended by a restart
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 0x5eed))
			dir := t.TempDir()
			want := core.NewDurable()
			var wantElection *ElectionRecord
			s, st := open(t, Config{Dir: dir, MaxBatch: 1 + r.IntN(64)})
			checkState(t, "first open", st, want, nil, 1)
			for round := range rounds {
				var answers []<-chan error
				for range r.IntN(12) {
					var b Batch
					for range r.IntN(8) {
						b.Writes = append(b.Writes, randWrite(r))
					}
					if r.IntN(4) == 0 {
						b.Election = randElection(r)
						wantElection = b.Election
					}
					want.Apply(b.Writes)
					ch := s.Submit(b)
					if r.IntN(3) == 0 { // sometimes wait, so batches group differently
						if err := wait(t, ch); err != nil {
							t.Fatal(err)
						}
						continue
					}
					answers = append(answers, ch)
				}
				for _, ch := range answers {
					if err := wait(t, ch); err != nil {
						t.Fatal(err)
					}
				}
				inc := uint32(round + 1)
				got, err := s.Load()
				if err != nil {
					t.Fatal(err)
				}
				checkState(t, fmt.Sprintf("round %d live", round), got, want, wantElection, inc)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s, st = open(t, Config{Dir: dir, MaxBatch: 1 + r.IntN(64)})
				checkState(t, fmt.Sprintf("round %d reopened", round), st, want, wantElection, inc+1)
				if got, want := snapshot(t, s), wantSnapshot(want); !reflect.DeepEqual(got, want) {
					t.Fatalf("round %d: snapshot\n got: %+v\nwant: %+v", round, got, want)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSnapshot: name order is byte order of names even where the escaping
// of 0x00 could reorder them; tickets follow their high-water mark; names
// with only tickets report 0; an error from fn stops the stream.
func TestSnapshot(t *testing.T) {
	s, _ := open(t, Config{InMemory: true})
	defer s.Close()
	want := core.NewDurable()
	var ws []core.Write
	for i, name := range names {
		ws = append(ws,
			core.Write{Kind: core.WriteTicket, Name: name, Entry: wire.Entry{Req: wire.RequestID{Node: 2, Seq: 1}, Ticket: uint64(i), Mode: wire.ModeReadOnly, State: wire.StateTicket}, Lifetime: 7},
			core.Write{Kind: core.WriteTicket, Name: name, Entry: wire.Entry{Req: wire.RequestID{Node: 1, Seq: 1 << 40}, State: wire.StateChoosing, Active: true}, Lifetime: -1},
		)
	}
	ws = append(ws, core.Write{Kind: core.WriteHighWater, Name: "only-high", Entry: wire.Entry{Ticket: 0}})
	want.Apply(ws)
	if err := wait(t, s.Submit(Batch{Writes: ws})); err != nil {
		t.Fatal(err)
	}
	got := snapshot(t, s)
	if w := wantSnapshot(want); !reflect.DeepEqual(got, w) {
		t.Fatalf("snapshot\n got: %+v\nwant: %+v", got, w)
	}
	if got[1].Name != "" || got[1].High != 0 || len(got[1].Tickets) != 2 {
		t.Fatalf("first name: %+v", got[1])
	}
	stop := errors.New("stop")
	calls := 0
	_, err := s.Snapshot(func(string, uint64, []core.DurableTicket) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("Snapshot with failing fn: %v after %d calls", err, calls)
	}
}

// TestInMemory: the in-memory store works, writes no file anywhere under
// Dir, and starts empty each time.
func TestInMemory(t *testing.T) {
	dir := t.TempDir()
	cwd, _ := os.ReadDir(".")
	for range 2 {
		// The commit's time is observed once per transaction that
		// changed something, before its batches are answered.
		var observed []time.Duration
		s, st := open(t, Config{InMemory: true, Dir: dir, ObserveCommit: func(d time.Duration) { observed = append(observed, d) }})
		checkState(t, "open", st, core.NewDurable(), nil, 1)
		w := []core.Write{{Kind: core.WriteTicket, Name: "x", Entry: wire.Entry{Ticket: 3}}}
		if err := wait(t, s.Submit(Batch{Writes: w})); err != nil {
			t.Fatal(err)
		}
		want := core.NewDurable()
		want.Apply(w)
		got, err := s.Load()
		if err != nil {
			t.Fatal(err)
		}
		checkState(t, "load", got, want, nil, 1)
		// A batch that changes nothing commits no transaction.
		noop := []core.Write{{Kind: core.WriteLifetime, Name: "y"}, {Kind: core.WriteFence, Epoch: 0}}
		if err := wait(t, s.Submit(Batch{Writes: noop})); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Syncs != 1 || st.Batches != 2 || st.Writes != 3 {
			t.Fatalf("stats %+v", st)
		}
		if len(observed) != 1 || observed[0] < 0 {
			t.Fatalf("commits observed %v, want one", observed)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("in-memory store wrote %v", ents)
	}
	if after, _ := os.ReadDir("."); len(after) != len(cwd) {
		t.Fatalf("in-memory store wrote to the working directory: %v", after)
	}
}

// TestCorruptValue: bytes under a known key that do not decode exactly make
// Load (and a later Open) fail with ErrCorrupt, never panic; so does an
// unknown key.
func TestCorruptValue(t *testing.T) {
	req := wire.RequestID{Node: 1, Seq: 2}
	good := encodeTicket(wire.Entry{Ticket: 5, Mode: 1, State: 2}, 9)
	cases := []struct {
		name string
		k, v []byte
	}{
		{"garbage ticket", ticketKey("n\x00", req), []byte("garbage!")},
		{"empty ticket", ticketKey("n", req), nil},
		{"unknown version", ticketKey("n", req), append([]byte{2}, good[1:]...)},
		{"truncated ticket", ticketKey("n", req), good[:len(good)-1]},
		{"trailing bytes", ticketKey("n", req), append(slices.Clone(good), 0)},
		{"bad flags", ticketKey("n", req), []byte{1, 5, 1, 2, 2, 18}},
		{"short ticket key", highKey("n")[:4], encodeUint(1)},
		{"ticket key with short req", ticketKey("n", req)[:10], good},
		{"bad name escape", []byte("na\x00\x02h"), encodeUint(1)},
		{"unterminated name", []byte("nabc"), encodeUint(1)},
		{"high water varint overflow", highKey("n"), []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"fence trailing", keyFence, []byte{1, 1, 1}},
		{"incarnation over 32 bits", keyInc, encodeUint(1 << 32)},
		{"led view epoch mismatch", ledKey(3), encodeLed(wire.View{Epoch: 4})},
		{"led view huge leader count", ledKey(3), []byte{1, 3, 0xff, 0xff, 0x03}},
		{"led key length", []byte("l\x00\x00"), encodeLed(wire.View{})},
		{"election truncated", keyElection, encodeElection(&ElectionRecord{Promised: 3})[:3]},
		{"unknown key", []byte("x"), []byte{1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := open(t, Config{Dir: dir})
			if err := wait(t, s.Submit(Batch{Writes: []core.Write{{Kind: core.WriteTicket, Name: "n", Entry: wire.Entry{Req: req, Ticket: 1}}}})); err != nil {
				t.Fatal(err)
			}
			if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(c.k, c.v) }); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Load(); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load: %v, want ErrCorrupt", err)
			}
			if _, err := s.Snapshot(func(string, uint64, []core.DurableTicket) error { return nil }); c.k[0] == 'n' && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Snapshot: %v, want ErrCorrupt", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			_, _, err := Open(context.Background(), Config{Dir: dir})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Open: %v, want ErrCorrupt naming %s", err, dir)
			}
		})
	}
}

// TestCorruptWhileWriting: a write that must read a corrupt value fails
// the batch with ErrFailed and ErrCorrupt.
func TestCorruptWhileWriting(t *testing.T) {
	s, _ := open(t, Config{InMemory: true})
	defer s.Close()
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(keyComplete, []byte{7}) }); err != nil {
		t.Fatal(err)
	}
	err := wait(t, s.Submit(Batch{Writes: []core.Write{{Kind: core.WriteLedView, View: wire.View{Epoch: 3}}}}))
	if !errors.Is(err, ErrFailed) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrFailed and ErrCorrupt", err)
	}
}

// TestOpenDamaged: a directory that cannot be a store gives an error naming
// the path, never a panic of Open's own goroutine. Each Open runs in a
// child process: Badger v4.9.6 leaks goroutines when its Open fails, and
// panics in a goroutine of its own on a garbage table file
// (dgraph-io/badger#2201), which no caller can recover.
func TestOpenDamaged(t *testing.T) {
	garbage := bytes.Repeat([]byte("not badger\x00\xa5\xff"), 400)
	overwrite := func(t *testing.T, dir, pattern string) {
		files, _ := filepath.Glob(filepath.Join(dir, "badger", pattern))
		if len(files) == 0 {
			t.Fatalf("no %s file", pattern)
		}
		for _, f := range files {
			fd, err := os.OpenFile(f, os.O_WRONLY, 0)
			must(t, err)
			_, err = fd.WriteAt(garbage, 0)
			must(t, err)
			must(t, fd.Close())
		}
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns Config.Dir
		crash bool                                  // Badger may crash the process
	}{
		{name: "dir is a file", setup: func(t *testing.T, dir string) string {
			f := filepath.Join(dir, "file")
			must(t, os.WriteFile(f, nil, 0o600))
			return f
		}},
		{name: "badger dir is a file", setup: func(t *testing.T, dir string) string {
			must(t, os.WriteFile(filepath.Join(dir, "badger"), nil, 0o600))
			return dir
		}},
		{name: "unreadable", setup: func(t *testing.T, dir string) string {
			if os.Geteuid() == 0 {
				t.Skip("root reads anything")
			}
			use(t, dir)
			must(t, os.Chmod(filepath.Join(dir, "badger"), 0))
			t.Cleanup(func() { os.Chmod(filepath.Join(dir, "badger"), 0o700) })
			return dir
		}},
		{name: "garbage MANIFEST", setup: func(t *testing.T, dir string) string {
			must(t, os.MkdirAll(filepath.Join(dir, "badger"), 0o700))
			must(t, os.WriteFile(filepath.Join(dir, "badger", "MANIFEST"), garbage, 0o600))
			return dir
		}},
		{name: "garbage KEYREGISTRY", setup: func(t *testing.T, dir string) string {
			use(t, dir)
			overwrite(t, dir, "KEYREGISTRY")
			return dir
		}},
		{name: "garbage MANIFEST after use", setup: func(t *testing.T, dir string) string {
			use(t, dir)
			overwrite(t, dir, "MANIFEST")
			return dir
		}},
		{name: "garbage vlog", setup: func(t *testing.T, dir string) string {
			use(t, dir)
			overwrite(t, dir, "*.vlog")
			return dir
		}},
		{name: "garbage write-ahead log", setup: func(t *testing.T, dir string) string {
			s, _ := open(t, Config{Dir: dir})
			must(t, wait(t, s.Submit(Batch{Writes: []core.Write{{Kind: core.WriteHighWater, Name: "a", Entry: wire.Entry{Ticket: 1}}}})))
			dir = crashImage(t, s) // a closed store has flushed its log to a table
			must(t, s.Close())
			overwrite(t, dir, "*.mem")
			return dir
		}},
		{name: "garbage table", crash: true, setup: func(t *testing.T, dir string) string {
			use(t, dir)
			overwrite(t, dir, "*.sst")
			return dir
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.setup(t, t.TempDir())
			out, crashed := openInChild(t, dir)
			switch {
			case crashed && c.crash:
				t.Logf("known Badger crash (dgraph-io/badger#2201): %.200s", out)
			case crashed:
				t.Fatalf("child crashed:\n%s", out)
			case !strings.HasPrefix(out, "refused (in use: false): "):
				t.Fatalf("Open did not refuse: %s", out)
			case !strings.Contains(out, dir):
				t.Fatalf("error does not name %s: %s", dir, out)
			default:
				t.Log(strings.TrimSpace(out))
			}
		})
	}
}

// TestOpenInUse: a store another process has open (a second agent on
// the same data directory) is refused with ErrInUse, naming the
// directory, and the store stays whole. The second Open runs in a child:
// it is another process, and a failed badger.Open leaks goroutines.
func TestOpenInUse(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, Config{Dir: dir})
	must(t, wait(t, s.Submit(Batch{Writes: []core.Write{{Kind: core.WriteHighWater, Name: "a", Entry: wire.Entry{Ticket: 7}}}})))
	out, crashed := openInChild(t, dir)
	if crashed || !strings.HasPrefix(out, "refused (in use: true): ") || !strings.Contains(out, dir) {
		t.Fatalf("a second Open of a store in use (crashed %t): %s", crashed, out)
	}
	t.Log(strings.TrimSpace(out))
	must(t, s.Close())
	s, st := open(t, Config{Dir: dir})
	defer s.Close()
	if st.Durable.HighWater["a"] != 7 {
		t.Fatalf("after the refused Open: high water %d, want 7", st.Durable.HighWater["a"])
	}
}

// openInChild runs Open on dir in a child process and returns its output,
// and whether it crashed.
func openInChild(t *testing.T, dir string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	// The race detector otherwise waits a second at exit.
	cmd.Env = append(os.Environ(), childEnv+"="+dir, "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("child hung:\n%s", out)
	}
	return string(out), err != nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func use(t *testing.T, dir string) {
	t.Helper()
	s, _ := open(t, Config{Dir: dir})
	must(t, wait(t, s.Submit(Batch{Writes: []core.Write{{Kind: core.WriteHighWater, Name: "a", Entry: wire.Entry{Ticket: 1}}}})))
	must(t, s.Close())
}

// crashImage copies the files of a live store, as a crash would leave them.
// Badger's logs are large sparse files: zero blocks are skipped.
func crashImage(t *testing.T, s *Store) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "badger"), 0o700))
	files, err := filepath.Glob(filepath.Join(s.path, "*"))
	must(t, err)
	zero := make([]byte, 64<<10)
	for _, f := range files {
		src, err := os.Open(f)
		must(t, err)
		dst, err := os.Create(filepath.Join(dir, "badger", filepath.Base(f)))
		must(t, err)
		buf := make([]byte, len(zero))
		var off int64
		for {
			n, err := io.ReadFull(src, buf)
			if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
				_, werr := dst.WriteAt(buf[:n], off)
				must(t, werr)
			}
			off += int64(n)
			if err != nil {
				break
			}
		}
		must(t, dst.Truncate(off))
		must(t, dst.Close())
		must(t, src.Close())
	}
	return dir
}

// TestCrashImage: what Submit acknowledged is in the files without Close
// (the write-ahead log was synced), and a restart from them finds it.
func TestCrashImage(t *testing.T) {
	s, _ := open(t, Config{Dir: t.TempDir()})
	defer s.Close()
	r := rand.New(rand.NewPCG(1, 2))
	want := core.NewDurable()
	for range 50 {
		b := Batch{Writes: []core.Write{randWrite(r), randWrite(r)}}
		want.Apply(b.Writes)
		must(t, wait(t, s.Submit(b)))
	}
	dir := crashImage(t, s)
	if m, _ := filepath.Glob(filepath.Join(dir, "badger", "*.mem")); len(m) == 0 {
		t.Fatal("no write-ahead log in the crash image")
	}
	s2, st := open(t, Config{Dir: dir})
	defer s2.Close()
	checkState(t, "after crash", st, want, nil, 2)
}

// TestStickyFailure: when Badger fails a commit, the batch fails with
// ErrFailed wrapping Badger's error, and so does every later Submit.
// The failure is real: Badger's DB is closed underneath the store.
func TestStickyFailure(t *testing.T) {
	var logs bytes.Buffer
	s, _ := open(t, Config{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	w := []core.Write{{Kind: core.WriteDelete, Name: "a"}}
	must(t, wait(t, s.Submit(Batch{Writes: w})))
	must(t, s.db.Close())
	err := wait(t, s.Submit(Batch{Writes: w}))
	if !errors.Is(err, ErrFailed) || !errors.Is(err, badger.ErrDBClosed) {
		t.Fatalf("got %v, want ErrFailed wrapping badger.ErrDBClosed", err)
	}
	for _, b := range []Batch{{}, {Writes: w}} {
		if err2 := wait(t, s.Submit(b)); !errors.Is(err2, ErrFailed) {
			t.Fatalf("later Submit: %v, want ErrFailed", err2)
		}
	}
	st := s.Stats()
	if st.Batches != 1 || st.Failures != 3 || st.LastError != err.Error() {
		t.Fatalf("stats %+v", st)
	}
	if !strings.Contains(logs.String(), "store write failed") {
		t.Fatalf("failure not logged: %s", logs.String())
	}
	must(t, s.Close())
}

// TestClose: Close answers every queued batch, is idempotent, and
// everything after it fails with ErrClosed.
func TestClose(t *testing.T) {
	s, _ := open(t, Config{Dir: t.TempDir(), MaxBatch: 3})
	var answers []<-chan error
	for i := range 200 {
		answers = append(answers, s.Submit(Batch{Writes: []core.Write{{Kind: core.WriteHighWater, Name: "a", Entry: wire.Entry{Ticket: uint64(i)}}}}))
	}
	must(t, s.Close())
	for _, ch := range answers {
		select {
		case err := <-ch:
			must(t, err) // queued before Close: committed
		default:
			t.Fatal("a batch queued before Close was not answered")
		}
	}
	must(t, s.Close())
	if err := wait(t, s.Submit(Batch{})); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
	if _, err := s.Load(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Load after Close: %v", err)
	}
	if _, err := s.Snapshot(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Snapshot after Close: %v", err)
	}
}

// TestCloseRacesSubmit: Submits racing Close are each answered, nil or
// ErrClosed, never left hanging; Load and Snapshot racing Close either
// read a consistent state or fail with ErrClosed.
func TestCloseRacesSubmit(t *testing.T) {
	s, _ := open(t, Config{InMemory: true})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			_, err := s.Load()
			if errors.Is(err, ErrClosed) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := s.Snapshot(func(string, uint64, []core.DurableTicket) error { return nil }); err != nil && !errors.Is(err, ErrClosed) {
				t.Error(err)
				return
			}
		}
	})
	// Close once the writers are under way: the first answered Submit says
	// so, so Close meets a busy store however the machine is loaded.
	busy := make(chan struct{})
	var once sync.Once
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				err := wait(t, s.Submit(Batch{Writes: []core.Write{{Kind: core.WriteFence, Epoch: uint64(g*1000 + i)}}}))
				once.Do(func() { close(busy) })
				if err != nil && !errors.Is(err, ErrClosed) {
					t.Error(err)
					return
				}
			}
		})
	}
	<-busy
	must(t, s.Close())
	wg.Wait()
}

// TestOversizedBatches: batches beyond Badger's transaction limit still
// apply exactly; queued medium batches are split between batches, and only
// a batch too big on its own is split between its writes (one warning).
func TestOversizedBatches(t *testing.T) {
	var logs bytes.Buffer
	dir := t.TempDir()
	s, _ := open(t, Config{Dir: dir, MaxBatch: 1 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	want := core.NewDurable()
	batch := func(n, salt int) Batch {
		var b Batch
		for i := range n {
			name := fmt.Sprintf("%04d-%d-%s", i, salt, strings.Repeat("x", 1000))
			b.Writes = append(b.Writes, core.Write{Kind: core.WriteTicket, Name: name, Entry: wire.Entry{Req: wire.RequestID{Node: 1, Seq: uint64(i)}, Ticket: uint64(i + 1)}})
		}
		return b
	}
	// About 2 KiB of keys per write: Badger takes ~1100 per transaction.
	big := batch(3000, 0)
	want.Apply(big.Writes)
	answers := []<-chan error{s.Submit(big)}
	for i := range 8 { // queued behind big: grouped, then split
		b := batch(400, i+1)
		want.Apply(b.Writes)
		answers = append(answers, s.Submit(b))
	}
	for _, ch := range answers {
		must(t, wait(t, ch))
	}
	st := s.Stats()
	// Big needs at least 2 transactions; ungrouped, the medium batches
	// would need 8 more: fewer syncs mean they shared transactions.
	if st.Batches != 9 || st.Writes != 3000+8*400 || st.Syncs < 3 || st.Syncs >= 2+8 {
		t.Fatalf("stats %+v", st)
	}
	if n := strings.Count(logs.String(), "too big"); n != 1 {
		t.Fatalf("%d split warnings, want 1:\n%s", n, logs.String())
	}
	must(t, s.Close())
	s, st2 := open(t, Config{Dir: dir})
	defer s.Close()
	checkState(t, "reopened", st2, want, nil, 2)
}

// TestApplyOrderWithinBatch pins the cases where a write depends on an
// earlier one of the same transaction.
func TestApplyOrderWithinBatch(t *testing.T) {
	req := wire.RequestID{Node: 4, Seq: 9}
	ws := []core.Write{
		{Kind: core.WriteLifetime, Name: "a", Entry: wire.Entry{Req: req}, Lifetime: 5}, // no ticket yet: nothing
		{Kind: core.WriteTicket, Name: "a", Entry: wire.Entry{Req: req, Ticket: 0}},     // ticket 0: no high water
		{Kind: core.WriteLifetime, Name: "a", Entry: wire.Entry{Req: req}, Lifetime: 6},
		{Kind: core.WriteTicket, Name: "b", Entry: wire.Entry{Req: req, Ticket: 8}},
		{Kind: core.WriteDelete, Name: "b", Entry: wire.Entry{Req: req}}, // high water 8 stays
		{Kind: core.WriteHighWater, Name: "b", Entry: wire.Entry{Ticket: 3}},
		{Kind: core.WriteHighWater, Name: "c", Entry: wire.Entry{Ticket: 0}}, // creates c: 0
		{Kind: core.WriteLedView, View: wire.View{Epoch: 2, Leaders: []wire.NodeID{1}}},
		{Kind: core.WriteLedView, View: wire.View{Epoch: 5}},
		{Kind: core.WriteComplete, Epoch: 2},                 // drops led 2
		{Kind: core.WriteLedView, View: wire.View{Epoch: 2}}, // not above complete: ignored
		{Kind: core.WriteComplete, Epoch: 1},                 // complete stays 2
		{Kind: core.WriteFence, Epoch: 7},
		{Kind: core.WriteFence, Epoch: 6},
	}
	want := core.NewDurable()
	want.Apply(ws)
	s, _ := open(t, Config{InMemory: true})
	defer s.Close()
	must(t, wait(t, s.Submit(Batch{Writes: ws})))
	got, err := s.Load()
	must(t, err)
	checkState(t, "load", got, want, nil, 1)
	if len(want.Led) != 1 || want.HighWater["b"] != 8 || want.Tickets["a"][req].Lifetime != 6 {
		t.Fatalf("reference is not what the test means: %+v", want)
	}
}

// TestDiskNearlyFull: below MinFree free bytes the store fails every write,
// stickily, before Badger could die of SIGBUS on a full disk; Open refuses
// a directory whose file system is already that full.
func TestDiskNearlyFull(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, Config{Dir: dir})
	w := []core.Write{{Kind: core.WriteHighWater, Name: "a", Entry: wire.Entry{Ticket: 3}}}
	must(t, wait(t, s.Submit(Batch{Writes: w})))
	s.freeSpace = func(string) (int64, error) { return 1 << 20, nil } // 1 MiB left
	err := wait(t, s.Submit(Batch{Writes: w}))
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "disk nearly full") {
		t.Fatalf("write on a nearly full disk: %v", err)
	}
	s.freeSpace = freeSpace
	if err := wait(t, s.Submit(Batch{Writes: w})); !errors.Is(err, ErrFailed) {
		t.Fatalf("the failure is not sticky: %v", err)
	}
	must(t, s.Close())
	// A file system with less free space than MinFree (no disk has 2^62
	// bytes): Open refuses.
	if _, _, err := Open(context.Background(), Config{Dir: dir, MinFree: 1 << 62}); !errors.Is(err, ErrFailed) {
		t.Fatalf("Open on a nearly full disk: %v", err)
	}
	s2, st := open(t, Config{Dir: dir, MinFree: -1})
	if st.Durable.HighWater["a"] != 3 {
		t.Fatalf("high water after reopening: %v", st.Durable.HighWater)
	}
	must(t, s2.Close())
}

// TestIdentity: a store records the identity of its first start and
// refuses another; an empty store with an identity that is not fresh is a
// lost store, refused without writing anything; a store without identity
// adopts the first one it is opened with.
func TestIdentity(t *testing.T) {
	dir := t.TempDir()
	s, st := open(t, Config{Dir: dir, Identity: 7, Fresh: true})
	if st.Identity != 7 || st.Incarnation != 1 {
		t.Fatalf("first open: identity %d, incarnation %d", st.Identity, st.Incarnation)
	}
	must(t, wait(t, s.Submit(Batch{Writes: []core.Write{{Kind: core.WriteHighWater, Name: "a", Entry: wire.Entry{Ticket: 4}}}})))
	got, err := s.Load()
	if err != nil || got.Identity != 7 {
		t.Fatalf("Load: identity %d, %v", got.Identity, err)
	}
	must(t, s.Close())

	s, st = open(t, Config{Dir: dir, Identity: 7})
	if st.Identity != 7 || st.Incarnation != 2 || st.Durable.HighWater["a"] != 4 {
		t.Fatalf("reopened: %+v", st)
	}
	must(t, s.Close())

	_, _, err = Open(context.Background(), Config{Dir: dir, Identity: 8})
	if !errors.Is(err, ErrOtherIdentity) || !strings.Contains(err.Error(), "node 7") || !strings.Contains(err.Error(), "is 8") {
		t.Fatalf("another identity: %v", err)
	}
	s, st = open(t, Config{Dir: dir}) // 0: not checked
	if st.Identity != 7 || st.Incarnation != 3 {
		t.Fatalf("after a refusal, unchecked: identity %d, incarnation %d", st.Identity, st.Incarnation)
	}
	must(t, s.Close())

	// The disk is lost, the identity key stays.
	must(t, os.RemoveAll(filepath.Join(dir, "badger")))
	for range 2 {
		_, _, err = Open(context.Background(), Config{Dir: dir, Identity: 7})
		if !errors.Is(err, ErrLost) {
			t.Fatalf("lost store: %v, want ErrLost", err)
		}
		for _, part := range []string{dir, "node 7", "identity.key", "A node lost its disk", "--join", "sluice members remove OLD", "sluice members add NEW"} {
			if !strings.Contains(err.Error(), part) {
				t.Fatalf("lost store: %q does not say %q", err, part)
			}
		}
	}
	// Nothing was written: a new identity starts it as a first start.
	s, st = open(t, Config{Dir: dir, Identity: 9, Fresh: true})
	checkState(t, "new identity", st, core.NewDurable(), nil, 1)
	if st.Identity != 9 {
		t.Fatalf("new identity: %d", st.Identity)
	}
	must(t, s.Close())
	s, st = open(t, Config{Dir: dir, Identity: 9})
	if st.Identity != 9 || st.Incarnation != 2 {
		t.Fatalf("new identity reopened: identity %d, incarnation %d", st.Identity, st.Incarnation)
	}
	must(t, s.Close())

	// In memory, every start is fresh.
	s, st = open(t, Config{InMemory: true, Identity: 3})
	if st.Identity != 3 || st.Incarnation != 1 {
		t.Fatalf("in memory: identity %d, incarnation %d", st.Identity, st.Incarnation)
	}
	must(t, s.Close())
}

// TestIdentityAdopted: a store of the previous release (an incarnation and
// a version 1 election record, no identity) keeps its state and adopts the
// identity it is next opened with; from then on it refuses any other.
func TestIdentityAdopted(t *testing.T) {
	dir := t.TempDir()
	s, st := open(t, Config{Dir: dir})
	if st.Identity != 0 {
		t.Fatalf("identity %d recorded without one", st.Identity)
	}
	p := &ElectionRecord{Promised: 6, Accepted: wire.View{Epoch: 6, Leaders: []wire.NodeID{1, 2, 3}, PrevEpoch: 2, PrevLeaders: []wire.NodeID{1}}}
	p.Valid = p.Accepted
	must(t, s.db.Update(func(txn *badger.Txn) error { return txn.Set(keyElection, encodeElectionV1(p)) }))
	must(t, s.Close())

	s, st = open(t, Config{Dir: dir, Identity: 5})
	checkState(t, "adopted", st, core.NewDurable(), p, 2)
	if st.Identity != 5 {
		t.Fatalf("adopted identity %d", st.Identity)
	}
	must(t, s.Close())
	if _, _, err := Open(context.Background(), Config{Dir: dir, Identity: 6, Fresh: true}); !errors.Is(err, ErrOtherIdentity) {
		t.Fatalf("another identity after adoption: %v", err)
	}
	s, st = open(t, Config{Dir: dir, Identity: 5})
	checkState(t, "reopened", st, core.NewDurable(), p, 3)
	must(t, s.Close())
}

// TestAge: every transaction that changes the store, the incarnation's
// bump included, adds one to its age, which survives a restart; a batch
// that changes nothing adds none.
func TestAge(t *testing.T) {
	dir := t.TempDir()
	s, st := open(t, Config{Dir: dir})
	if st.Age != 1 || s.Age() != 1 {
		t.Fatalf("first open: age %d, store says %d, want 1 (the incarnation)", st.Age, s.Age())
	}
	w := []core.Write{{Kind: core.WriteTicket, Name: "x", Entry: wire.Entry{Ticket: 3}}}
	for range 3 {
		if err := wait(t, s.Submit(Batch{Writes: w})); err != nil {
			t.Fatal(err)
		}
	}
	noop := []core.Write{{Kind: core.WriteLifetime, Name: "y"}}
	if err := wait(t, s.Submit(Batch{Writes: noop})); err != nil {
		t.Fatal(err)
	}
	if s.Age() != 4 {
		t.Fatalf("after three batches and a no-op: age %d, want 4", s.Age())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, st = open(t, Config{Dir: dir})
	defer s.Close()
	if got, err := s.Load(); err != nil || st.Age != 5 || got.Age != 5 {
		t.Fatalf("reopened: age %d, loaded %d (%v), want 5", st.Age, got.Age, err)
	}
}

// TestStoreFormat: a store of a newer format is refused with both formats
// named and nothing written, however often it is tried; a store with a
// record of this build's format opens; a store without one is format 1,
// and stays without one (the previous release still opens it).
func TestStoreFormat(t *testing.T) {
	dir := t.TempDir()
	s, st := open(t, Config{Dir: dir})
	must(t, s.db.View(func(txn *badger.Txn) error {
		if _, err := txn.Get(keyFormat); !errors.Is(err, badger.ErrKeyNotFound) {
			t.Errorf("a format 1 store got a format record: %v", err)
		}
		return nil
	}))
	must(t, s.db.Update(func(txn *badger.Txn) error { return txn.Set(keyFormat, encodeUint(Format+1)) }))
	must(t, s.Close())
	for range 2 {
		_, _, err := Open(context.Background(), Config{Dir: dir})
		if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), fmt.Sprintf("format is %d, this build reads formats 1 to %d", Format+1, Format)) {
			t.Fatalf("a newer store: %v", err)
		}
	}
	// Put this build's format back: it opens, and the refusals wrote
	// nothing (the incarnation is the next one).
	cfg := withDefaults(Config{Dir: dir})
	path, err := prepareDir(cfg.Dir, cfg.MinFree)
	must(t, err)
	db, err := openBadger(badgerOptions(cfg, path), path)
	must(t, err)
	must(t, db.Update(func(txn *badger.Txn) error { return txn.Set(keyFormat, encodeUint(Format)) }))
	must(t, db.Close())
	s, again := open(t, Config{Dir: dir})
	if again.Incarnation != st.Incarnation+1 {
		t.Errorf("incarnation %d after refused opens, want %d", again.Incarnation, st.Incarnation+1)
	}
	must(t, s.Close())
}

// TestMigrationIsAtomic: a migration that fails half-way (a write made,
// then an error: a crash mid-migration leaves the same, since the commit
// never happened) changes nothing and Open fails; the next start
// migrates once, and the start after that does not again.
func TestMigrationIsAtomic(t *testing.T) {
	defer func(f uint64) { formatNow = f; delete(migrations, Format) }(formatNow)
	dir := t.TempDir()
	s, _ := open(t, Config{Dir: dir})
	must(t, s.Close())
	formatNow = Format + 1
	ran := 0
	migrations[Format] = func(txn *badger.Txn) error {
		ran++
		if err := txn.Set(keyFence, encodeUint(42)); err != nil {
			return err
		}
		if ran == 1 {
			return errors.New("the power went out")
		}
		return nil
	}
	if _, _, err := Open(context.Background(), Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "the power went out") {
		t.Fatalf("a failed migration: %v", err)
	}
	formatNow = Format
	s, st := open(t, Config{Dir: dir}) // the old format, untouched
	if st.Durable.Fence != 0 {
		t.Fatalf("the failed migration's write stayed: fence %d", st.Durable.Fence)
	}
	must(t, s.Close())
	formatNow = Format + 1
	for range 2 {
		s, st = open(t, Config{Dir: dir})
		if st.Durable.Fence != 42 || ran != 2 {
			t.Fatalf("after the migration: fence %d, migration run %d times, want 42 and 2", st.Durable.Fence, ran)
		}
		must(t, s.Close())
	}
}

// TestLazyBatchesShareACommit: a lazy batch waits for the next batch that
// is not, and both commit in one transaction (one fsync); a lazy batch
// alone commits after LazyDelay; Close commits what waits. The delays are
// an hour where a commit must not happen by itself, so nothing here
// depends on the machine's speed.
func TestLazyBatchesShareACommit(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, Config{Dir: dir, LazyDelay: time.Hour})
	tomb := []core.Write{{Kind: core.WriteTomb, Name: "x", Entry: wire.Entry{Req: wire.RequestID{Node: 1, Seq: 1}}, Lifetime: 9, Lazy: true}}
	syncs := s.Stats().Syncs
	lazy := s.Submit(Batch{Writes: tomb, Lazy: true})
	// Nothing may answer it within its hour but another batch; a store
	// that commits it alone does so well within this wait (which the
	// right one passes however slow the machine).
	select {
	case err := <-lazy:
		t.Fatalf("a lazy batch committed by itself within its hour: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	ticket := []core.Write{{Kind: core.WriteTicket, Name: "y", Entry: wire.Entry{Req: wire.RequestID{Node: 1, Seq: 2}, Ticket: 4, State: wire.StateTicket}, Lifetime: 9}}
	must(t, wait(t, s.Submit(Batch{Writes: ticket})))
	must(t, wait(t, lazy))
	if got := s.Stats().Syncs - syncs; got != 1 {
		t.Fatalf("a lazy batch and the next one took %d commits, want 1", got)
	}
	// Alone, until Close: committed then, and there after a reopen.
	late := s.Submit(Batch{Writes: []core.Write{{Kind: core.WriteHighWater, Name: "z", Entry: wire.Entry{Ticket: 7}, Lazy: true}}, Lazy: true})
	must(t, s.Close())
	must(t, wait(t, late))
	s, st := open(t, Config{Dir: dir})
	if st.Durable.HighWater["z"] != 7 || st.Durable.HighWater["y"] != 4 {
		t.Fatalf("after Close and reopen: high water %v, want z 7 and y 4", st.Durable.HighWater)
	}
	must(t, s.Close())

	// A short delay: the lazy batch alone commits by itself.
	s, _ = open(t, Config{Dir: dir, LazyDelay: time.Millisecond})
	defer s.Close()
	must(t, wait(t, s.Submit(Batch{Writes: tomb, Lazy: true})))
	// And with no delay at all, as soon as it can.
	s2, _ := open(t, Config{Dir: t.TempDir(), LazyDelay: -1})
	defer s2.Close()
	must(t, wait(t, s2.Submit(Batch{Writes: tomb, Lazy: true})))
}

// The store runs none of Badger's compactors (they poll 20 times a
// second each) and compacts itself as its writes make tables: with 8 MiB
// memtables, 192 MiB of writes make some 24 level-0 tables, and Badger
// stalls every write at 15 of them until a compaction takes them away.
func TestCompactsAsItWrites(t *testing.T) {
	defer func(n int64) { memTableSize = n }(memTableSize)
	memTableSize = 8 << 20 // Badger's least with its value threshold
	s, _ := open(t, Config{InMemory: true})
	defer s.Close()
	r := rand.New(rand.NewPCG(1, 2))
	pad := strings.Repeat("p", 400)
	for i := range 9600 {
		b := Batch{Writes: make([]core.Write, 50)}
		for j := range b.Writes {
			b.Writes[j] = randWrite(r)
			b.Writes[j].Name = fmt.Sprintf("%s%d", pad, (i*50+j)%5000)
		}
		if err := wait(t, s.Submit(b)); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	levels := s.db.Levels()
	below := 0
	for _, l := range levels[1:] {
		below += l.NumTables
	}
	if levels[0].NumTables >= 6 || below == 0 {
		t.Fatalf("level 0 holds %d tables, the levels below %d: no compaction", levels[0].NumTables, below)
	}
}

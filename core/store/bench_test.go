package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// BenchmarkSubmit measures durable writes with 1 and 64 concurrent
// submitters, each waiting for its own batch of one ticket write: the
// second shows group commit (several batches per fsync).
func BenchmarkSubmit(b *testing.B) {
	for _, submitters := range []int{1, 64} {
		b.Run(fmt.Sprint("submitters=", submitters), func(b *testing.B) {
			s, _, err := Open(context.Background(), Config{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var wg sync.WaitGroup
			start := time.Now()
			b.ResetTimer()
			for g := range submitters {
				n := b.N / submitters
				if g < b.N%submitters {
					n++
				}
				wg.Go(func() {
					for i := range n {
						w := core.Write{Kind: core.WriteTicket, Name: fmt.Sprintf("lock-%d-%d", g, i%1000),
							Entry: wire.Entry{Req: wire.RequestID{Node: wire.NodeID(g), Seq: uint64(i)}, Ticket: uint64(i + 1), Mode: wire.ModeExclusive, State: wire.StateTicket}, Lifetime: 100}
						if err := <-s.Submit(Batch{Writes: []core.Write{w}}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			st := s.Stats()
			b.ReportMetric(float64(st.Writes)/time.Since(start).Seconds(), "writes/s")
			b.ReportMetric(float64(st.Batches)/float64(st.Syncs), "batches/sync")
		})
	}
}

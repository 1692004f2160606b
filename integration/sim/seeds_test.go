package sim

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// parallelSeeds runs run for seeds first..first+n-1 on as many goroutines
// as the machine has cores, and returns each seed's result in seed order,
// or the error of the lowest seed that failed (seeds above it may not
// have run). Each run is its own world, with its own PRNG, so the
// results are those of running the seeds one by one.
func parallelSeeds[R any](first int64, n int, run func(seed int64) (R, error)) ([]R, error) {
	results := make([]R, n)
	errs := make([]error, n)
	var next atomic.Int64
	var failed atomic.Int64 // offset+1 of the lowest failure so far, 0 if none
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if f := failed.Load(); f != 0 && i >= f-1 {
					continue // a lower seed failed already
				}
				results[i], errs[i] = run(first + i)
				if errs[i] != nil {
					for {
						f := failed.Load()
						if f != 0 && f-1 <= i || failed.CompareAndSwap(f, i+1) {
							break
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f != 0 {
		return nil, errs[f-1]
	}
	return results, nil
}

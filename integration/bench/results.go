package main

import (
	"math"
	"slices"
	"time"
)

// runResult is what one run of a workload on one system measured. Rates
// count the window only; attempts and errors the whole run.
type runResult struct {
	System   string `json:"system"`
	Storage  string `json:"storage"`
	Workload string `json:"workload"`
	Rep      int    `json:"rep"`

	WindowSeconds float64 `json:"window_s,omitempty"`
	// Cycles are the lock+release cycles (W4: grants; redis's W4: its
	// lock+unlock cycles) in the window.
	Cycles int `json:"cycles"`
	// Rate is Cycles per second (churn: names per second overall).
	Rate float64 `json:"rate"`
	// PerClient are each client's cycles; Fairness is their min/max.
	PerClient []int    `json:"per_client,omitempty"`
	Fairness  float64  `json:"fairness,omitempty"`
	Acquire   *latency `json:"acquire_ms,omitempty"`
	// PerCycle are sluice's agents' counters (agentCounters: fsyncs,
	// store batches, messages sent, summed over the agents) per
	// successful cycle of the whole run.
	PerCycle map[string]float64 `json:"per_cycle,omitempty"`

	Attempts     int            `json:"attempts"`
	Errors       map[string]int `json:"errors,omitempty"`
	ErrorSamples []string       `json:"error_samples,omitempty"`
	ErrorRate    float64        `json:"error_rate"`
	// Refused are the tries answered with a refusal, by reason.
	Refused map[string]int `json:"refused,omitempty"`

	Drains      []drainSample     `json:"drains,omitempty"`
	Revocations []revokeSample    `json:"revocations,omitempty"`
	Middleware  *middlewareResult `json:"middleware,omitempty"`
	Churn       *churnResult      `json:"churn,omitempty"`
}

// latency summarizes durations, in milliseconds.
type latency struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarizeLatency is nil for no samples. Percentiles are nearest-rank.
func summarizeLatency(ds []time.Duration) *latency {
	if len(ds) == 0 {
		return nil
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return &latency{N: len(s), P50: ms(percentile(s, 0.50)), P90: ms(percentile(s, 0.90)),
		P99: ms(percentile(s, 0.99)), Max: ms(s[len(s)-1]), Mean: ms(sum / time.Duration(len(s)))}
}

// percentile of sorted samples, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// summarize merges the clients' tallies of a loop workload.
func summarize(win window, ts []tally) *runResult {
	r := &runResult{WindowSeconds: win.end.Sub(win.start).Seconds()}
	var acquire []time.Duration
	for _, t := range ts {
		r.addTally(&t)
		r.PerClient = append(r.PerClient, t.cycles)
		acquire = append(acquire, t.acquire...)
	}
	r.Rate = float64(r.Cycles) / r.WindowSeconds
	r.Acquire = summarizeLatency(acquire)
	if lo, hi := slices.Min(r.PerClient), slices.Max(r.PerClient); hi > 0 {
		r.Fairness = float64(lo) / float64(hi)
	}
	r.finishErrors()
	return r
}

// addTally adds a client's attempts, cycles, errors and refusals.
func (r *runResult) addTally(t *tally) {
	r.Attempts += t.attempts
	r.Cycles += t.cycles
	r.addErrors(t.errors, t.samples)
	for k, v := range t.refused {
		if r.Refused == nil {
			r.Refused = map[string]int{}
		}
		r.Refused[k] += v
	}
}

func (r *runResult) addErrors(errs map[string]int, samples []string) {
	for k, v := range errs {
		if r.Errors == nil {
			r.Errors = map[string]int{}
		}
		r.Errors[k] += v
	}
	if room := 5 - len(r.ErrorSamples); room > 0 {
		r.ErrorSamples = append(r.ErrorSamples, samples[:min(room, len(samples))]...)
	}
}

// finishErrors computes the error rate: errors per attempt.
func (r *runResult) finishErrors() {
	if r.Attempts > 0 {
		r.ErrorRate = float64(r.errorCount()) / float64(r.Attempts)
	}
}

func (r *runResult) errorCount() int {
	n := 0
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// median of xs (NaN for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

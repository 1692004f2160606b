package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// maxErrorRate: a system whose clients failed more often than this in a
// workload has that workload's cells flagged, and misses its targets.
const maxErrorRate = 0.01

// row is one line of the table: one metric of a workload in one storage
// mode. Sluice, Etcd and Redis are nil when not measured (Redis is
// measured for W4 in memory only: the read path's reference); text cells
// (SluiceText, EtcdText, RedisText) say what numbers cannot.
type row struct {
	Workload   string   `json:"workload"`
	Storage    string   `json:"storage"`
	Metric     string   `json:"metric"`
	Sluice     *float64 `json:"sluice,omitempty"`
	Etcd       *float64 `json:"etcd,omitempty"`
	Ratio      *float64 `json:"ratio,omitempty"`
	Redis      *float64 `json:"redis,omitempty"`
	RedisRatio *float64 `json:"ratio_redis,omitempty"`
	SluiceText string   `json:"sluice_text"`
	EtcdText   string   `json:"etcd_text"`
	RedisText  string   `json:"redis_text"`
	Target     string   `json:"target,omitempty"`
	Result     string   `json:"result,omitempty"`
	// Floor is the machine's best for the figure (floor.go), FloorModel
	// what it is made of; OverFloor is sluice's cost over it (a latency
	// over the floor's, the floor's rate over sluice's): 1× is the floor.
	Floor      *float64 `json:"floor,omitempty"`
	FloorModel string   `json:"floor_model,omitempty"`
	OverFloor  *float64 `json:"over_floor,omitempty"`
}

// values are a row's numbers, nil where not measured.
type values struct{ sluice, etcd, redis *float64 }

// target is a speed or scale target a row is held to.
type target struct {
	text string
	// check is nil when the numbers to decide are missing; v are the
	// row's values, sluiceRuns the runs behind sluice's.
	check func(v values, sluiceRuns []*runResult) *bool
	// stretch, when set, is a further goal, told in the result of a
	// met target.
	stretch func(v values) *bool
}

// ratioOf is a/b, nil when either is missing or b is 0.
func ratioOf(a, b *float64) *float64 {
	if a == nil || b == nil || *b == 0 {
		return nil
	}
	x := *a / *b
	return &x
}

// judge applies ok to x, nil when x is.
func judge(x *float64, ok func(float64) bool) *bool {
	if x == nil {
		return nil
	}
	v := ok(*x)
	return &v
}

func ratioTarget(text string, ok func(ratio float64) bool) *target {
	return &target{text: text, check: func(v values, _ []*runResult) *bool { return judge(ratioOf(v.sluice, v.etcd), ok) }}
}

// redisTarget compares sluice to redis+redsync: ok, and stretch beyond it.
func redisTarget(text string, ok, stretch func(ratio float64) bool) *target {
	t := &target{text: text, check: func(v values, _ []*runResult) *bool { return judge(ratioOf(v.sluice, v.redis), ok) }}
	if stretch != nil {
		t.stretch = func(v values) *bool { return judge(ratioOf(v.sluice, v.redis), stretch) }
	}
	return t
}

func sluiceTarget(text string, ok func(v float64) bool) *target {
	return &target{text: text, check: func(v values, _ []*runResult) *bool { return judge(v.sluice, ok) }}
}

// runsOf are the runs of one workload, storage and system.
func (b *bench) runsOf(w, st, sys string) []*runResult {
	var out []*runResult
	for _, r := range b.runs {
		if r.Workload == w && r.Storage == st && r.System == sys {
			out = append(out, r)
		}
	}
	return out
}

// medianOf is the median of f over runs, nil without runs or values.
func medianOf(runs []*runResult, f func(*runResult) (float64, bool)) *float64 {
	var xs []float64
	for _, r := range runs {
		if v, ok := f(r); ok {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return nil
	}
	m := median(xs)
	return &m
}

// errorRate is the share of the runs' attempts that failed.
func errorRate(runs []*runResult) float64 {
	var errs, attempts int
	for _, r := range runs {
		errs += r.errorCount()
		attempts += r.Attempts
	}
	if attempts == 0 {
		return 0
	}
	return float64(errs) / float64(attempts)
}

// metric is one row's definition: how to get the value from the runs of
// a system, how to print it, and its target.
type metric struct {
	name   string
	value  func(runs []*runResult) *float64
	text   func(runs []*runResult) string // for rows of words; value nil then
	format func(float64) string
	target *target
	// noRatio: a ratio of the two says nothing (fairness is a ratio).
	noRatio bool
	// redis: the row has redis's figure too (W4's rate and latency).
	redis bool
	// over, when set, makes the row sluice's ratio of value to the same
	// figure of workload over's sluice runs in the same storage (W4n's to
	// W4's: nested names to flat ones).
	over string
	// floor, when set, is the operation this figure is of, in the
	// floor's steps; rate: the figure is a rate (its floor is the model's
	// operations at once over its latency), else a latency.
	floor *floorModel
	rate  bool
}

// withFloor is m held against the floor of model's operation.
func withFloor(m metric, model floorModel, ok bool) metric {
	if ok {
		m.floor = &model
	}
	return m
}

// ratioMetric is m's figure as a ratio to workload over's, without m's
// target (a ratio has its own).
func ratioMetric(m metric, name, over string) metric {
	m.name, m.over, m.noRatio, m.target = name, over, true, nil
	m.format = func(v float64) string { return fmtRatio(&v) }
	return m
}

// refusedMetric counts the tries refused, by reason.
func refusedMetric() metric {
	return metric{name: "tries refused (timedout / draining)", text: func(runs []*runResult) string {
		var t, d int
		for _, r := range runs {
			t, d = t+r.Refused["timedout"], d+r.Refused["draining"]
		}
		return fmt.Sprintf("%d / %d", t, d)
	}}
}

func rateMetric(name string) metric {
	return metric{name: name, format: fmtRate, rate: true, value: func(runs []*runResult) *float64 {
		return medianOf(runs, func(r *runResult) (float64, bool) { return r.Rate, true })
	}}
}

// perCycleMetrics are sluice's agents' fsyncs, store batches and
// messages sent per cycle (runResult.PerCycle): what a cycle costs the
// cluster, and how well the store groups its commits.
func perCycleMetrics() []metric {
	m := func(name, key string) metric {
		return metric{name: name, noRatio: true, format: func(v float64) string { return fmt.Sprintf("%.2f", v) },
			value: func(runs []*runResult) *float64 {
				return medianOf(runs, func(r *runResult) (float64, bool) { v, ok := r.PerCycle[key]; return v, ok })
			}}
	}
	// A commit's mean time: the disk as the leaders' answers wait for
	// it, beside the floor's bare fsync.
	commit := metric{name: "store commit, mean (3 agents; the write and its fsync)", noRatio: true, format: fmtUS,
		value: func(runs []*runResult) *float64 {
			return medianOf(runs, func(r *runResult) (float64, bool) {
				sec, ok := r.PerCycle["commit_seconds"]
				syncs := r.PerCycle["fsyncs"]
				if !ok || syncs <= 0 {
					return 0, false
				}
				return 1000 * sec / syncs, true // ms
			})
		}}
	cpu := metric{name: "CPU per cycle (3 agents)", noRatio: true, format: fmtUS,
		value: func(runs []*runResult) *float64 {
			return medianOf(runs, func(r *runResult) (float64, bool) {
				sec, ok := r.PerCycle["cpu_seconds"]
				return 1000 * sec, ok // ms
			})
		}}
	return []metric{m("fsyncs per cycle (3 agents)", "fsyncs"), m("store batches per cycle (3 agents)", "batches"),
		m("messages sent per cycle (3 agents)", "messages"),
		m("of them, reports to other agents", "reports"),
		m("network writes to other agents per cycle", "writes"),
		m("doorways done in one round per cycle", "one_round"), cpu, commit}
}

func acquireMetric(name string, p func(*latency) float64) metric {
	return metric{name: name, format: fmtMS, value: func(runs []*runResult) *float64 {
		return medianOf(runs, func(r *runResult) (float64, bool) {
			if r.Acquire == nil {
				return 0, false
			}
			return p(r.Acquire), true
		})
	}}
}

// drainMetric is a percentile over every drain of every repetition.
func drainMetric(name string, q float64, f func(drainSample) float64) metric {
	return metric{name: name, format: fmtMS, value: func(runs []*runResult) *float64 {
		var ds []time.Duration
		for _, r := range runs {
			for _, d := range r.Drains {
				ds = append(ds, time.Duration(f(d)*float64(time.Millisecond)))
			}
		}
		if len(ds) == 0 {
			return nil
		}
		slices.Sort(ds)
		v := ms(percentile(ds, q))
		return &v
	}}
}

func churnOf(runs []*runResult) *churnResult {
	for _, r := range runs {
		if r.Churn != nil {
			return r.Churn
		}
	}
	return nil
}

// metrics are the rows of each workload in storage st.
func metrics(w string, st storage) []metric {
	p50 := func(l *latency) float64 { return l.P50 }
	p99 := func(l *latency) float64 { return l.P99 }
	switch w {
	case "W1":
		rate, lat99 := rateMetric("cycles/s"), acquireMetric("acquire p99", p99)
		if st == durable {
			rate.target = ratioTarget("≥2× etcd", func(x float64) bool { return x >= 2 })
			lat99.target = ratioTarget("≤0.5× etcd", func(x float64) bool { return x <= 0.5 })
		} else {
			rate.target = ratioTarget("≥4× etcd on tmpfs", func(x float64) bool { return x >= 4 })
		}
		cycle, ok := floorModelOf(w, st, 1)
		grant, _ := floorModelOf("grant", st, 1)
		return append([]metric{withFloor(rate, cycle, ok), withFloor(acquireMetric("acquire p50", p50), grant, ok), withFloor(lat99, grant, ok)},
			perCycleMetrics()...)
	case "W2":
		handoff, ok := floorModelOf(w, st, 1)
		rate := withFloor(rateMetric("handoffs/s"), handoff, ok)
		rate.target = ratioTarget("≥5× etcd", func(x float64) bool { return x >= 5 })
		fair := metric{name: "fairness (min/max cycles per client)", format: func(v float64) string { return fmt.Sprintf("%.2f", v) },
			value: func(runs []*runResult) *float64 {
				return medianOf(runs, func(r *runResult) (float64, bool) { return r.Fairness, len(r.PerClient) > 0 })
			},
			target: sluiceTarget("≥0.9", func(v float64) bool { return v >= 0.9 }), noRatio: true}
		return append([]metric{rate, fair, acquireMetric("acquire p99", p99)}, perCycleMetrics()...)
	case "W3":
		cycles, ok := floorModelOf(w, st, 64)
		grant, _ := floorModelOf("grant", st, 1)
		rate := withFloor(rateMetric("cycles/s"), cycles, ok)
		if st == durable {
			rate.target = ratioTarget("≥2× etcd (stretch 3×)", func(x float64) bool { return x >= 2 })
			rate.target.stretch = func(v values) *bool { return judge(ratioOf(v.sluice, v.etcd), func(x float64) bool { return x >= 3 }) }
		}
		return append([]metric{rate, withFloor(acquireMetric("acquire p50", p50), grant, ok), withFloor(acquireMetric("acquire p99", p99), grant, ok)},
			perCycleMetrics()...)
	case "W4":
		refused := refusedMetric()
		// Redis's figures are its lock+unlock cycles of 64 keys: the
		// reference the read path's target sets for sluice's readers of one name.
		views, ok := floorModelOf(w, st, 64)
		call, _ := floorModelOf("call", st, 1)
		crowd, _ := floorModelOf("crowd call", st, 1)
		rate, lat50, lat99 := withFloor(rateMetric("grants/s"), views, ok), withFloor(acquireMetric("acquire p50", p50), call, ok),
			withFloor(acquireMetric("acquire p99", p99), crowd, ok)
		rate.redis, lat50.redis, lat99.redis = true, true, true
		if st == memory {
			rate.target = redisTarget("≥2× Redis+redsync", func(x float64) bool { return x >= 2 }, nil)
		}
		lat99.target = sluiceTarget("≤2 ms", func(v float64) bool { return v <= 2 })
		return []metric{rate, lat50, lat99, refused}
	case "W4n":
		rate, lat50, lat99 := rateMetric("grants/s"), acquireMetric("acquire p50", p50), acquireMetric("acquire p99", p99)
		lat99.target = sluiceTarget("≤2 ms", func(v float64) bool { return v <= 2 })
		// Nested names should cost a page view next to nothing once the
		// agent holds its shares: a fifth of the rate at most.
		rateVs := ratioMetric(rate, "grants/s, nested ÷ flat (W4)", "W4")
		rateVs.target = sluiceTarget("≥0.8×", func(v float64) bool { return v >= 0.8 })
		return []metric{rate, rateVs, lat50, lat99, ratioMetric(lat99, "acquire p99, nested ÷ flat (W4)", "W4"), refusedMetric()}
	case "W5":
		gap, ok := floorModelOf(w, st, 1)
		gap99 := withFloor(drainMetric("writer grant − last reader release, p99", 0.99, func(d drainSample) float64 { return d.AfterLastReleaseMS }), gap, ok)
		gap99.target = sluiceTarget("≤5 ms", func(v float64) bool { return v <= 5 })
		return []metric{
			withFloor(drainMetric("writer grant − last reader release, p50", 0.5, func(d drainSample) float64 { return d.AfterLastReleaseMS }), gap, ok),
			gap99,
			drainMetric("readmission after the writer's release, p50", 0.5, func(d drainSample) float64 { return d.ReadmitMS }),
			drainMetric("readmission after the writer's release, p99", 0.99, func(d drainSample) float64 { return d.ReadmitMS }),
			drainMetric("writer wait (ask to grant), p50", 0.5, func(d drainSample) float64 { return d.WriterWaitMS }),
		}
	case "revoke":
		rev := func(q float64) metric {
			return revokeMetric(fmt.Sprintf("revocation latency (writer's ask → first draining refusal, latest agent), p%.0f", 100*q), q,
				func(s revokeSample) *float64 { return s.RevocationMS })
		}
		gap := func(q float64) metric {
			return revokeMetric(fmt.Sprintf("writer grant − last reader release, p%.0f", 100*q), q, func(s revokeSample) *float64 {
				if s.Drain == nil {
					return nil
				}
				return &s.Drain.AfterLastReleaseMS
			})
		}
		rev99 := rev(0.99)
		rev99.target = sluiceTarget("≤10 ms", func(v float64) bool { return v <= 10 })
		seen := metric{name: "drains with a draining refusal at every agent", text: func(runs []*runResult) string {
			n, all := 0, 0
			for _, r := range runs {
				for _, s := range r.Revocations {
					all++
					if s.RevocationMS != nil {
						n++
					}
				}
			}
			return fmt.Sprintf("%d of %d", n, all)
		}}
		return []metric{rev(0.5), rev99, gap(0.5), gap(0.99), seen}
	case "middleware":
		lat := func(name string, f func(*middlewareResult) *latency, p func(*latency) float64) metric {
			return metric{name: name, format: fmtUS, value: func(runs []*runResult) *float64 {
				return medianOf(runs, func(r *runResult) (float64, bool) {
					if r.Middleware == nil || f(r.Middleware) == nil {
						return 0, false
					}
					return p(f(r.Middleware)), true
				})
			}}
		}
		plain := func(m *middlewareResult) *latency { return m.Plain }
		wrapped := func(m *middlewareResult) *latency { return m.Wrapped }
		added := metric{name: "middleware added latency p50", format: fmtUS, value: func(runs []*runResult) *float64 {
			return medianOf(runs, func(r *runResult) (float64, bool) {
				if m := r.Middleware; m != nil && m.Plain != nil && m.Wrapped != nil {
					return m.Wrapped.P50 - m.Plain.P50, true
				}
				return 0, false
			})
		}, target: sluiceTarget("≤50 µs", func(v float64) bool { return v <= 0.05 })}
		added = withFloor(added, floorModel{calls: 0, what: "no call (page views count themselves in on the lent lease)"}, true)
		proxied := func(m *middlewareResult) *latency { return m.Proxied }
		proxyAdded := func(name string, p func(*latency) float64) metric {
			return metric{name: name, format: fmtUS, value: func(runs []*runResult) *float64 {
				return medianOf(runs, func(r *runResult) (float64, bool) {
					if m := r.Middleware; m != nil && m.Plain != nil && m.Proxied != nil {
						return p(m.Proxied) - p(m.Plain), true
					}
					return 0, false
				})
			}}
		}
		bareAdded := metric{name: "bare reverse proxy added latency p50, same clients (Go's httputil.ReverseProxy, no lock)", format: fmtUS,
			value: func(runs []*runResult) *float64 {
				return medianOf(runs, func(r *runResult) (float64, bool) {
					if m := r.Middleware; m != nil && m.Plain != nil && m.BareProxied != nil {
						return m.BareProxied.P50 - m.Plain.P50, true
					}
					return 0, false
				})
			}}
		proxyP50 := withFloor(proxyAdded("sluice proxy added latency p50 (vs the handler hit directly)", p50),
			floorModel{hops: 1, what: "a bare reverse proxy's hop; no call to the agent on the lent lease"}, true)
		proxyP50.target = sluiceTarget("≤100 µs", func(v float64) bool { return v <= 0.1 })
		rates := metric{name: "requests/s, plain / behind the middleware", text: func(runs []*runResult) string {
			rate := func(f func(*middlewareResult) float64) *float64 {
				return medianOf(runs, func(r *runResult) (float64, bool) {
					if r.Middleware == nil {
						return 0, false
					}
					return f(r.Middleware), true
				})
			}
			pl := rate(func(m *middlewareResult) float64 { return m.PlainRate })
			wr := rate(func(m *middlewareResult) float64 { return m.WrappedRate })
			if pl == nil || wr == nil {
				return "—"
			}
			return fmtRate(*pl) + " / " + fmtRate(*wr)
		}}
		crowd := func(r *runResult) (float64, float64, bool) {
			if m := r.Middleware; m != nil && m.CrowdPlainRate > 0 {
				return m.CrowdPlainRate, m.CrowdWrappedRate, true
			}
			return 0, 0, false
		}
		crowdRates := metric{name: fmt.Sprintf("requests/s with %d clients, plain / behind the middleware", crowdClients), text: func(runs []*runResult) string {
			pl := medianOf(runs, func(r *runResult) (float64, bool) { p, _, ok := crowd(r); return p, ok })
			wr := medianOf(runs, func(r *runResult) (float64, bool) { _, w, ok := crowd(r); return w, ok })
			if pl == nil || wr == nil {
				return "—"
			}
			return fmtRate(*pl) + " / " + fmtRate(*wr)
		}}
		kept := metric{name: fmt.Sprintf("throughput kept behind the middleware with %d clients", crowdClients), noRatio: true,
			format: func(v float64) string { return fmt.Sprintf("%.0f %%", 100*v) },
			value: func(runs []*runResult) *float64 {
				return medianOf(runs, func(r *runResult) (float64, bool) { p, w, ok := crowd(r); return w / p, ok })
			}, target: sluiceTarget("≥70 %", func(v float64) bool { return v >= 0.7 })}
		return []metric{
			lat("request latency p50, plain handler", plain, p50),
			lat("request latency p99, plain handler", plain, p99),
			lat("request latency p50, behind client.Middleware", wrapped, p50),
			lat("request latency p99, behind client.Middleware", wrapped, p99),
			added, rates, crowdRates, kept,
			lat("request latency p50, through sluice proxy", proxied, p50),
			lat("request latency p99, through sluice proxy", proxied, p99),
			proxyP50, proxyAdded("sluice proxy added latency p99", p99), bareAdded,
		}
	case "churn":
		rate := metric{name: "names/s overall", format: fmtRate, value: func(runs []*runResult) *float64 {
			return medianOf(runs, func(r *runResult) (float64, bool) { return r.Rate, r.Churn != nil })
		}}
		rate.target = &target{text: "≥2,000/s, flat, all done", check: func(_ values, sl []*runResult) *bool { return churnMet(sl) }}
		return []metric{rate,
			{name: "rate per 5 s", text: churnRange},
			{name: "names done", text: churnDone},
			{name: "max server RSS after", format: fmtMiB, value: maxRSS,
				target: sluiceTarget("≤200 MiB", func(v float64) bool { return v <= 200 })},
		}
	}
	return nil
}

// revokeMetric is a percentile over every drain of every repetition of
// the revocation workload that has a value f.
func revokeMetric(name string, q float64, f func(revokeSample) *float64) metric {
	return metric{name: name, format: fmtMS, value: func(runs []*runResult) *float64 {
		var ds []time.Duration
		for _, r := range runs {
			for _, s := range r.Revocations {
				if v := f(s); v != nil {
					ds = append(ds, time.Duration(*v*float64(time.Millisecond)))
				}
			}
		}
		if len(ds) == 0 {
			return nil
		}
		slices.Sort(ds)
		v := ms(percentile(ds, q))
		return &v
	}}
}

// churnRange shows whether the churn's rate held: its first and last
// interval, and the lowest and highest.
func churnRange(runs []*runResult) string {
	c := churnOf(runs)
	if c == nil || len(c.Intervals) == 0 {
		return "—"
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, iv := range c.Intervals {
		lo, hi = min(lo, iv.Rate), max(hi, iv.Rate)
	}
	s := fmt.Sprintf("first %s, last %s, min %s, max %s", fmtRate(c.Intervals[0].Rate),
		fmtRate(c.Intervals[len(c.Intervals)-1].Rate), fmtRate(lo), fmtRate(hi))
	switch flat, known := c.flat(); {
	case !known:
		s += " (too short to judge)"
	case flat:
		s += " (flat)"
	default:
		s += " (not flat)"
	}
	return s
}

func churnDone(runs []*runResult) string {
	c := churnOf(runs)
	if c == nil {
		return "—"
	}
	s := fmt.Sprintf("%s of %s in %.0f s", fmtCount(c.Done), fmtCount(c.Names), c.Seconds)
	switch {
	case c.Stalled:
		s += ", STALLED"
	case c.Capped:
		s += ", stopped at the cap"
	}
	return s
}

// maxRSS is the largest resident set of the servers after the churn, MiB.
func maxRSS(runs []*runResult) *float64 {
	c := churnOf(runs)
	if c == nil || len(c.RSS) == 0 {
		return nil
	}
	var m int64
	for _, r := range c.RSS {
		m = max(m, r.Bytes)
	}
	v := float64(m) / (1 << 20)
	return &v
}

// churnMet decides the churn's rate target: the overall rate, a flat
// rate, and every name done.
func churnMet(runs []*runResult) *bool {
	c := churnOf(runs)
	if c == nil {
		return nil
	}
	flat, known := c.flat()
	met := c.Done == c.Names && !c.Stalled && c.Seconds > 0 && float64(c.Done)/c.Seconds >= 2000 && (flat || !known)
	return &met
}

// rows builds the table.
func (b *bench) rows() []row {
	var out []row
	for _, w := range b.cfg.only {
		for _, st := range b.cfg.storages {
			sl, et, rd := b.runsOf(w, st.String(), "sluice"), b.runsOf(w, st.String(), "etcd"), b.runsOf(w, st.String(), "redis")
			if len(sl) == 0 && len(et) == 0 && len(rd) == 0 {
				continue
			}
			slFlag, etFlag, rdFlag := errorFlag(sl), errorFlag(et), errorFlag(rd)
			for i, m := range metrics(w, st) {
				r := row{Workload: w, Storage: st.String(), Metric: m.name, RedisText: "—"}
				if m.value != nil {
					r.Sluice, r.Etcd = valueOf(m, sl), valueOf(m, et)
					if m.over != "" {
						r.Sluice, r.Etcd = ratioOf(r.Sluice, valueOf(m, b.runsOf(m.over, st.String(), "sluice"))), nil
					}
					r.SluiceText, r.EtcdText = cell(m, r.Sluice), cell(m, r.Etcd)
					if !m.noRatio {
						r.Ratio = ratioOf(r.Sluice, r.Etcd)
					}
					if m.redis {
						r.Redis = valueOf(m, rd)
						r.RedisText = cell(m, r.Redis)
						r.RedisRatio = ratioOf(r.Sluice, r.Redis)
					}
				} else {
					r.SluiceText, r.EtcdText = textOf(m, sl), textOf(m, et)
				}
				if i == 0 {
					r.SluiceText += slFlag
					r.EtcdText += etFlag
					if len(rd) > 0 {
						r.RedisText += rdFlag
					}
				}
				if m.floor != nil {
					r.FloorModel = m.floor.what
					if fl := b.floor.latencyMS(*m.floor); fl != nil && *fl > 0 {
						r.Floor, r.OverFloor = fl, ratioOf(r.Sluice, fl)
						if m.rate {
							rate := 1000 * max(m.floor.per, 1) / *fl
							r.Floor, r.OverFloor = &rate, ratioOf(&rate, r.Sluice)
						}
					}
				}
				if m.target != nil {
					v := values{r.Sluice, r.Etcd, r.Redis}
					r.Target = m.target.text
					r.Result = verdict(m.target.check(v, sl), slFlag != "")
					if m.target.stretch != nil && r.Result == "met" {
						if ok := m.target.stretch(v); ok != nil && *ok {
							r.Result = "met, stretch met"
						} else {
							r.Result = "met, stretch missed"
						}
					}
				}
				out = append(out, r)
			}
		}
	}
	return out
}

func valueOf(m metric, runs []*runResult) *float64 {
	if len(runs) == 0 {
		return nil
	}
	return m.value(runs)
}

func textOf(m metric, runs []*runResult) string {
	if len(runs) == 0 {
		return "—"
	}
	return m.text(runs)
}

func cell(m metric, v *float64) string {
	if v == nil {
		return "—"
	}
	return m.format(*v)
}

// errorFlag marks a system whose error rate is over maxErrorRate.
func errorFlag(runs []*runResult) string {
	if e := errorRate(runs); e > maxErrorRate {
		return fmt.Sprintf(" ⚠ %.1f%% errors", 100*e)
	}
	return ""
}

func verdict(met *bool, errorsFlagged bool) string {
	switch {
	case errorsFlagged:
		return "missed (errors)"
	case met == nil:
		return "n/a"
	case *met:
		return "met"
	}
	return "missed"
}

func fmtRate(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f/s", v)
	}
	return fmtCount(int(math.Round(v))) + "/s"
}

func fmtMS(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
}

// fmtUS prints v, in ms, in microseconds: the middleware's scale.
func fmtUS(v float64) string { return fmt.Sprintf("%.0f µs", 1000*v) }

func fmtMiB(v float64) string { return fmt.Sprintf("%.0f MiB", v) }

// fmtCount prints n with thousands separators.
func fmtCount(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + fmtCount(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// markdown is the report: settings, table, notes and errors.
func (b *bench) markdown(rows []row, elapsed time.Duration) string {
	var sb strings.Builder
	c := b.cfg
	fmt.Fprintf(&sb, "%s\n\n", b.machine.line())
	fmt.Fprintf(&sb, "Settings: %d repetition(s) of each workload, %s measured after %s of warm-up, medians of the repetitions; "+
		"W5 and revoke: %d drains per repetition, percentiles over all of them; churn: %s names by %d clients, once per system and storage, "+
		"capped at %s, stopped as stalled after %s without progress; clients round-robin over the 3 members.\n\n",
		c.reps, c.window, c.warmup, c.drains, fmtCount(c.names), churnClients, c.churnCap, c.churnStall)
	// Redis's columns only when it ran: it has figures in W4's rows alone.
	withRedis := slices.ContainsFunc(b.runs, func(r *runResult) bool { return r.System == "redis" })
	fmt.Fprintf(&sb, "%s. The floor column is the fewest of these steps the figure's operation takes (the model beside it), "+
		"and sluice's cost over it: a latency over the floor's, the floor's rate over sluice's; 1× is the machine's best.\n\n", b.floor.line())
	if withRedis {
		sb.WriteString("| Workload | Storage | Metric | sluice | etcd | sluice/etcd | redis+redsync | sluice/redis | floor | sluice over floor | Target | Result |\n")
		sb.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	} else {
		sb.WriteString("| Workload | Storage | Metric | sluice | etcd | sluice/etcd | floor | sluice over floor | Target | Result |\n")
		sb.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	}
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s |", r.Workload, r.Storage, r.Metric, r.SluiceText, r.EtcdText, fmtRatio(r.Ratio))
		if withRedis {
			fmt.Fprintf(&sb, " %s | %s |", r.RedisText, fmtRatio(r.RedisRatio))
		}
		floorCell := "—"
		if r.Floor != nil {
			floorCell = r.floorText() + " (" + r.FloorModel + ")"
		}
		fmt.Fprintf(&sb, " %s | %s | %s | %s |\n", floorCell, fmtRatio(r.OverFloor), dash(r.Target), dash(r.Result))
	}
	sb.WriteString("\n")
	for _, w := range workloads() {
		if slices.Contains(c.only, w.id) {
			fmt.Fprintf(&sb, "- %s: %s\n", w.id, w.title)
		}
	}
	var errs []string
	for _, r := range b.runs {
		if n := r.errorCount(); n > 0 {
			errs = append(errs, fmt.Sprintf("- %s %s %s rep %d: %d of %d attempts failed (%.2f%%): %v; e.g. %q",
				r.Workload, r.Storage, r.System, r.Rep, n, r.Attempts, 100*r.ErrorRate, r.Errors, r.ErrorSamples))
		}
	}
	if len(errs) > 0 {
		sb.WriteString("\nClient errors (every one counted; a rate over 1% flags the workload's first row):\n\n")
		sb.WriteString(strings.Join(errs, "\n") + "\n")
	}
	if len(b.notes) > 0 {
		sb.WriteString("\nNotes:\n\n")
		for _, n := range b.notes {
			fmt.Fprintf(&sb, "- %s\n", n)
		}
	}
	fmt.Fprintf(&sb, "\nElapsed: %s; load average at the end %s.\n", elapsed.Round(time.Second), loadAvg())
	return sb.String()
}

func fmtRatio(x *float64) string {
	if x == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f×", *x)
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// report writes results.md, results.json and results.svg to the out
// directory and the Markdown to w.
func (b *bench) report(w io.Writer, elapsed time.Duration) error {
	rows := b.rows()
	md := b.markdown(rows, elapsed)
	if _, err := io.WriteString(w, md); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.cfg.out, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(map[string]any{
		"machine": b.machine, "settings": b.settings(), "elapsed_s": elapsed.Seconds(),
		"rows": rows, "runs": b.runs, "notes": b.notes,
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.cfg.out, "results.json"), raw, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.cfg.out, "results.svg"), []byte(b.chart(rows)), 0o644)
}

func (b *bench) settings() map[string]any {
	var st []string
	for _, s := range b.cfg.storages {
		st = append(st, s.String())
	}
	c := b.cfg
	return map[string]any{"reps": c.reps, "window_s": c.window.Seconds(), "warmup_s": c.warmup.Seconds(),
		"names": c.names, "drains": c.drains, "workloads": c.only, "storage": st, "systems": c.systems,
		"churn_cap_s": c.churnCap.Seconds(), "churn_stall_s": c.churnStall.Seconds(), "churn_clients": churnClients}
}

// floorText prints the row's floor in its figure's unit: a rate, or a
// latency in milliseconds (microseconds for the middleware's rows).
func (r row) floorText() string {
	switch {
	case r.Floor == nil:
		return "—"
	case strings.HasSuffix(r.Metric, "/s") || strings.Contains(r.Metric, "/s,"):
		return fmtRate(*r.Floor)
	case r.Workload == "middleware":
		return fmtUS(*r.Floor)
	}
	return fmtMS(*r.Floor)
}

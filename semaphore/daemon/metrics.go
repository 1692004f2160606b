package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// metrics are the node's Prometheus series. The loop updates them as
// things happen (they are safe for concurrent use); the API serves them at
// /metrics from the node's own registry, never the global one.
type metrics struct {
	reg        *prometheus.Registry
	grants     *prometheus.CounterVec
	failures   *prometheus.CounterVec
	wait       *prometheus.HistogramVec
	hold       *prometheus.HistogramVec
	active     *prometheus.GaugeVec
	waiters    prometheus.Gauge
	views      prometheus.Counter
	leaderSets prometheus.Counter
	handoffs   prometheus.Counter
	phases     *prometheus.HistogramVec
	messages   *prometheus.CounterVec
	persists   prometheus.Counter
	rejected   prometheus.Counter
	forced     prometheus.Counter
	// changesRefused: membership changes that failed; foreign: messages of
	// another cluster; stale: check-ins of a node's older life, refused.
	changesRefused, foreign, stale prometheus.Counter
	lastLeaders                    string
	lastPhase                      map[wire.RequestID]phaseMark
	handoffSeen                    uint64
}

type phaseMark struct {
	phase string
	at    time.Time
}

// latency buckets from 100 µs to about 100 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 4, 11)

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), lastPhase: map[wire.RequestID]phaseMark{}}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		f(c)
		return c
	}
	m.grants = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_grants_total",
		Help: "Locks granted to this node's clients, by mode."}, []string{"mode"})
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_failures_total",
		Help: "Requests of this node's clients that ended without a grant, by reason (timedout, draining, ...)."}, []string{"reason"})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_wait_seconds",
		Help: "Time from a request to its grant, by mode.", Buckets: latencyBuckets}, []string{"mode"})
	m.hold = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_hold_seconds",
		Help: "Time from a grant to the lease's end, by mode.", Buckets: latencyBuckets}, []string{"mode"})
	m.active = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_active_leases",
		Help: "Leases this node's clients hold, by mode."}, []string{"mode"})
	m.waiters = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_waiters",
		Help: "Requests of this node's clients waiting for a grant."})
	m.changesRefused = counter("sluice_membership_changes_refused_total",
		"Membership changes asked of this node that failed (bad, concurrent, or not committed).")
	m.foreign = counter("sluice_foreign_messages_total",
		"Messages refused because they came from another cluster (another bootstrap) or a node not yet joined.")
	m.stale = counter("sluice_stale_lives_total",
		"Check-ins refused because this node knows a newer life of the sender (a lost or restored store).")
	m.views = counter("sluice_views_total",
		"Valid views (epochs) this node adopted.")
	m.leaderSets = counter("sluice_leader_changes_total",
		"Views adopted whose leaders differ from the previous view's.")
	m.handoffs = counter("sluice_handoffs_total",
		"Lock table takeovers this node finished as a new leader.")
	m.phases = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_bakery_phase_seconds",
		Help:    "Time a request of this node spent in each bakery phase (entering, add-ticket, waiting).",
		Buckets: latencyBuckets}, []string{"phase"})
	m.messages = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_messages_total",
		Help: "Lock and election messages, by direction (in, out, dropped)."}, []string{"direction"})
	m.persists = counter("sluice_store_submits_total",
		"Batches of writes the node handed to its store.")
	m.rejected = counter("sluice_rejected_messages_total",
		"Messages from peers refused as malformed, stale or misdirected.")
	m.forced = counter("sluice_force_unlocks_total",
		"Operator force-unlocks sent from this node.")
	for _, c := range []prometheus.Collector{m.grants, m.failures, m.wait, m.hold, m.active, m.waiters,
		m.phases, m.messages} {
		f(c)
	}
	return m
}

// Registry is where the node's metrics are; the agent adds the mesh's and
// the store's and serves it.
func (n *Node) Registry() *prometheus.Registry { return n.metrics.reg }

// observePhases times the bakery phases of this node's requests: a
// request that enters a phase, or is gone, closes its last phase. Only the
// changes a Ready lists are read, not every request.
func (n *Node) observePhases(changes []core.PhaseChange, now time.Time) {
	m := n.metrics
	for _, c := range changes {
		last, ok := m.lastPhase[c.Handle]
		if ok && last.phase != c.Phase {
			m.phases.WithLabelValues(last.phase).Observe(now.Sub(last.at).Seconds())
		}
		switch {
		case c.Phase == "":
			delete(m.lastPhase, c.Handle)
		case !ok || last.phase != c.Phase:
			m.lastPhase[c.Handle] = phaseMark{c.Phase, now}
		}
	}
}

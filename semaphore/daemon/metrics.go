package daemon

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
)

// metrics are the node's Prometheus series. The loop updates them as
// things happen (they are safe for concurrent use); the API serves them at
// /metrics from the node's own registry, never the global one.
type metrics struct {
	reg      *prometheus.Registry
	grants   *prometheus.CounterVec
	failures *prometheus.CounterVec
	wait     *prometheus.HistogramVec
	hold     *prometheus.HistogramVec
	active   *prometheus.GaugeVec
	waiters  prometheus.Gauge
	// pageViews: the page views on this node's clients' lent leases, as
	// their clients last said (POST /v1/page-views).
	pageViews  prometheus.Gauge
	views      prometheus.Counter
	leaderSets prometheus.Counter
	handoffs   prometheus.Counter
	phases     *prometheus.HistogramVec
	messages   *prometheus.CounterVec
	// msgIn, msgOut: messages' children, resolved once (one per message
	// otherwise); dropped counts what the transport could not queue.
	msgIn, msgOut, dropped prometheus.Counter
	// peerMessages: messages sent to other nodes, by kind; peerOut its
	// children by wire.Kind, resolved once.
	peerMessages *prometheus.CounterVec
	peerOut      [256]prometheus.Counter
	// oneRound: doorways done in one round (core.Stats.OneRoundDoorways),
	// oneRoundSeen the count already added.
	oneRound     prometheus.Counter
	oneRoundSeen uint64
	// bypasses: page views that took the bakery by themselves
	// (core.Stats.ShareBypasses), bypassSeen the count already added.
	bypasses   prometheus.Counter
	bypassSeen uint64
	persists   prometheus.Counter
	rejected   prometheus.Counter
	forced     prometheus.Counter
	// forbidden: API calls refused by the caller's role, by action.
	forbidden *prometheus.CounterVec
	// releasesUnanswered: releases of the compact protocol's version 2
	// that no client waited for and that failed, by error code.
	releasesUnanswered *prometheus.CounterVec
	// changesRefused: membership changes that failed; foreign: messages of
	// another cluster; stale: check-ins of a node's older life, refused.
	changesRefused, foreign, stale prometheus.Counter
	lastLeaders                    string
	lastPhase                      map[wire.RequestID]phaseMark
	phaseSeries                    map[string]prometheus.Observer // phases' series, by phase (the loop's)
	handoffSeen                    uint64
}

type phaseMark struct {
	phase string
	at    time.Time
}

// latency buckets from 50 µs to 2 minutes, 20 of them (a factor of about
// 1.5): a local reader's grant and a drain's wait on one scale.
var latencyBuckets = prometheus.ExponentialBucketsRange(0.00005, 120, 20)

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), lastPhase: map[wire.RequestID]phaseMark{},
		phaseSeries: map[string]prometheus.Observer{}}
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
	m.forbidden = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_api_forbidden_total",
		Help: "API calls refused because the caller's role does not allow them, by action."}, []string{"action"})
	f(m.forbidden)
	m.releasesUnanswered = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_api_unanswered_release_failures_total",
		Help: "Releases sent without waiting for an answer (the compact protocol's version 2) that failed, by error code; their leases end at their expiry."},
		[]string{"code"})
	f(m.releasesUnanswered)
	m.waiters = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_waiters",
		Help: "Requests of this node's clients waiting for a grant."})
	m.pageViews = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_lent_page_views",
		Help: "Page views running on read leases this node's clients lend to them (the middleware, sluice proxy), as the clients last said."})
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
		Help:    "Time a request of this node spent in each phase (queued, entering, add-ticket, waiting, held, releasing, waiting-shared, held-shared).",
		Buckets: latencyBuckets}, []string{"phase"})
	m.messages = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_messages_total",
		Help: "Lock and election messages, by direction (in, out)."}, []string{"direction"})
	m.msgIn, m.msgOut = m.messages.WithLabelValues("in"), m.messages.WithLabelValues("out")
	m.peerMessages = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_peer_messages_total",
		Help: "Lock and election messages sent to other nodes, by kind (enter, add-ticket, report, ...): where a workload's traffic goes."}, []string{"kind"})
	for k := range m.peerOut {
		if wire.Kind(k).Valid() {
			m.peerOut[k] = m.peerMessages.WithLabelValues(wire.Kind(k).String())
		}
	}
	m.oneRound = counter("sluice_one_round_doorways_total",
		"Doorways of this node's requests that a quorum of leaders completed in one round (the node proposed the name's next number with its choosing flag).")
	m.bypasses = counter("sluice_share_bypasses_total",
		"Readers that went through the bakery by themselves because this node's shared read ticket of their name could not be had at once (its try failed or timed out): each costs the leaders' rounds a shared page view does not.")
	m.dropped = counter("sluice_messages_dropped_total",
		"Lock and election messages the transport could not queue for their peer (its queue full, or no such peer).")
	m.persists = counter("sluice_store_submits_total",
		"Batches of writes the node handed to its store.")
	m.rejected = counter("sluice_rejected_messages_total",
		"Messages from peers refused as malformed, stale or misdirected.")
	m.forced = counter("sluice_force_unlocks_total",
		"Operator force-unlocks sent from this node.")
	for _, c := range []prometheus.Collector{m.grants, m.failures, m.wait, m.hold, m.active, m.waiters, m.pageViews,
		m.phases, m.messages, m.peerMessages} {
		f(c)
	}
	// Every label a series can have, at zero from the start: a rate or an
	// alert on a series that has not happened yet still has data.
	for _, mode := range []semaphore.Mode{semaphore.ReadOnly, semaphore.ReadWritePriority, semaphore.ReadWrite,
		semaphore.ReadWriteGentle, semaphore.Exclusive} {
		m.grants.WithLabelValues(mode.String())
		m.active.WithLabelValues(mode.String())
		m.wait.WithLabelValues(mode.String())
		m.hold.WithLabelValues(mode.String())
	}
	for _, r := range codes.Rows() {
		if r.Wire != wire.CodeNone {
			m.failures.WithLabelValues(r.Wire.String())
		}
		m.releasesUnanswered.WithLabelValues(r.Code)
	}
	for _, p := range core.PhaseNames() {
		m.phases.WithLabelValues(p)
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
			m.phaseObserver(last.phase).Observe(now.Sub(last.at).Seconds())
		}
		switch {
		case c.Phase == "":
			delete(m.lastPhase, c.Handle)
		case !ok || last.phase != c.Phase:
			m.lastPhase[c.Handle] = phaseMark{c.Phase, now}
		}
	}
}

// phaseObserver is the phase histogram's series of phase, looked up once:
// a page view changes phase twice.
func (m *metrics) phaseObserver(phase string) prometheus.Observer {
	o, ok := m.phaseSeries[phase]
	if !ok {
		o = m.phases.WithLabelValues(phase)
		m.phaseSeries[phase] = o
	}
	return o
}

// stateCollector reports the node's state at each scrape, from one Status
// (one turn of the node's loop): the gauges an alert on NO_LOCK, a lost
// leader or an unreachable member watches.
type stateCollector struct {
	node                                     *Node
	ready, leader, epoch, members, reachable *prometheus.Desc
}

func newStateCollector(n *Node) *stateCollector {
	return &stateCollector{node: n,
		ready:     prometheus.NewDesc("sluice_ready", "1 when this node is LOCK_READY (a quorum of leaders in a valid view), 0 when NO_LOCK.", nil, nil),
		leader:    prometheus.NewDesc("sluice_leader", "1 when this node is a leader of the current view.", nil, nil),
		epoch:     prometheus.NewDesc("sluice_epoch", "The epoch of the view this node is in (0: none yet).", nil, nil),
		members:   prometheus.NewDesc("sluice_members", "Members of the cluster, as this node's election knows them.", nil, nil),
		reachable: prometheus.NewDesc("sluice_members_reachable", "Members this node hears from (itself included).", nil, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ready, c.leader, c.epoch, c.members, c.reachable} {
		ch <- d
	}
}

// stateScrapeWait bounds the Status a scrape asks of a busy loop.
const stateScrapeWait = 2 * time.Second

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), stateScrapeWait)
	defer cancel()
	st, err := c.node.Status(ctx)
	if err != nil {
		// A stopped or stuck node is not ready; the rest is not known.
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, 0)
		return
	}
	reachable := 0
	for _, m := range st.Members {
		if m.Alive {
			reachable++
		}
	}
	for _, v := range []struct {
		d *prometheus.Desc
		x float64
	}{{c.ready, boolGauge(st.Ready)}, {c.leader, boolGauge(st.Leader)}, {c.epoch, float64(st.View.Epoch)},
		{c.members, float64(len(st.Members))}, {c.reachable, float64(reachable)}} {
		ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, v.x)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// buildInfoGauge is the sluice_build_info series: 1, labelled with the build's
// version, commit and Go version (the CLI sets them from the build).
func buildInfoGauge(version, revision, goVersion string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_build_info",
		Help:        "1, labelled with the version, commit and Go version of this agent's build.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion}},
		func() float64 { return 1 })
}

// sentToPeer counts a message of kind k sent to another node.
func (m *metrics) sentToPeer(k wire.Kind) {
	if c := m.peerOut[k]; c != nil {
		c.Inc()
	}
}

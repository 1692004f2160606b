package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// The cluster-wide view: only leaders keep the lock table, so any agent
// asks the view's leaders for theirs (p2p's query protocol) and merges a
// quorum of answers. A granted lease is in a quorum of the leaders'
// tables, so it is in the merge of any quorum of them.

// tableQuery is the question of a lock-table query.
type tableQuery struct {
	Prefix string `json:"prefix"`
	// Audit asks for the agent's audit notes instead (a JSON list); an
	// agent from before them answers its table, which the asker skips.
	Audit bool `json:"audit,omitempty"`
	// Brief: leave the requests granted on a shared read ticket out of
	// the answer (one per page view in flight; SharedReaders counts them).
	Brief bool `json:"brief,omitempty"`
}

// querier asks a peer a question over the mesh (p2p.Host.Query).
type querier interface {
	Query(ctx context.Context, node wire.NodeID, question []byte) ([]byte, error)
}

// leaderQueryWait bounds one leader's answer to a cluster-wide view.
const leaderQueryWait = 3 * time.Second

// answerTableQuery answers another agent's question for this node's lock
// table (its replica table when it is a leader).
func (n *Node) answerTableQuery(ctx context.Context, _ wire.NodeID, question []byte) ([]byte, error) {
	var q tableQuery
	if err := json.Unmarshal(question, &q); err != nil {
		return nil, fmt.Errorf("%w: table query: %v", codes.ErrInvalid, err)
	}
	if q.Audit {
		return json.Marshal(n.Audit())
	}
	t, err := n.Locks(ctx, q.Prefix)
	if err != nil {
		return nil, err
	}
	if q.Brief {
		t.Requests = slices.DeleteFunc(t.Requests, func(r api.OwnRequest) bool { return r.Phase == heldShared })
	}
	// This node's own requests go too: the asker shows their owners.
	return json.Marshal(t)
}

// ClusterLocks is the lock table of the names starting with prefix as a
// quorum of the view's leaders hold it, merged, with this node's own
// requests; asked from any agent. ErrNotReady when fewer than a quorum of
// the leaders answer.
func (n *Node) ClusterLocks(ctx context.Context, q querier, prefix string) (api.Table, error) {
	local, err := n.Locks(ctx, prefix)
	if err != nil {
		return api.Table{}, err
	}
	var view wire.View
	if err := n.do(ctx, func() { view = n.core.View() }); err != nil {
		return api.Table{}, err
	}
	if len(view.Leaders) == 0 {
		return api.Table{}, fmt.Errorf("%w: no view yet: the leaders are not known", codes.ErrNotReady)
	}
	question, err := json.Marshal(tableQuery{Prefix: prefix, Brief: true})
	if err != nil {
		return api.Table{}, err
	}
	answers := make([]*api.Table, len(view.Leaders))
	errs := make([]error, len(view.Leaders))
	var wg sync.WaitGroup
	for i, l := range view.Leaders {
		if l == n.cfg.Self {
			if local.Leader {
				answers[i] = &local
			}
			continue
		}
		wg.Go(func() {
			qctx, cancel := context.WithTimeout(ctx, leaderQueryWait)
			defer cancel()
			b, err := q.Query(qctx, l, question)
			if err != nil {
				errs[i] = err
				return
			}
			var t api.Table
			if err := json.Unmarshal(b, &t); err != nil {
				errs[i] = fmt.Errorf("leader %d's table: %w", l, err)
				return
			}
			if t.Leader { // a leader of an older view answers as a plain agent
				answers[i] = &t
			}
		})
	}
	wg.Wait()
	var got []*api.Table
	for _, t := range answers {
		if t != nil {
			got = append(got, t)
		}
	}
	if len(got) < view.Quorum() {
		return api.Table{}, fmt.Errorf("%w: %d of the %d leaders answered, a quorum is %d (%v)", codes.ErrNotReady,
			len(got), len(view.Leaders), view.Quorum(), cmp.Or(firstError(errs), fmt.Errorf("no table")))
	}
	out := mergeTables(got)
	out.Node, out.NodeName, out.Leader, out.Requests = local.Node, local.NodeName, local.Leader, local.Requests
	n.addAgentsWord(ctx, q, question, &out, append(got, &local))
	return out, nil
}

// agentWord is what agents say of their own requests in a table: owners
// by request, and readers on shared read tickets by node and name.
type agentWord struct {
	owners  map[string]string
	holds   map[string]api.OwnRequest // a writer's reason and expected end
	readers map[string]map[string]int // node → name → readers
}

func (w *agentWord) add(t *api.Table) {
	readers := t.SharedReaders
	counted := readers != nil
	if !counted { // none, or an agent from before SharedReaders: count them
		readers = map[string]int{}
	}
	for _, r := range t.Requests {
		w.owners[r.Request] = r.Owner
		if r.Reason != "" || !r.ETA.IsZero() || !r.GraceEnd.IsZero() || r.Revoked != 0 || r.Preview != "" {
			w.holds[r.Request] = r
		}
		if !counted && r.Phase == heldShared {
			readers[r.Name]++
		}
	}
	w.readers[t.Node] = readers
}

// addAgentsWord fills in the owners of t's entries, and the readers on
// its shared tickets: what each request's own agent says (its
// Requests and SharedReaders), from the tables at hand and, for the other
// agents whose requests are in t, by asking them; best effort (an agent
// that does not answer leaves its owners and readers unknown).
func (n *Node) addAgentsWord(ctx context.Context, q querier, question []byte, t *api.Table, have []*api.Table) {
	word := agentWord{owners: map[string]string{}, holds: map[string]api.OwnRequest{}, readers: map[string]map[string]int{}}
	asked := map[string]bool{}
	for _, h := range have {
		asked[h.Node] = true
		word.add(h)
	}
	var ask []wire.NodeID
	for _, l := range t.Locks {
		for _, e := range l.Entries {
			if !asked[e.Node] {
				asked[e.Node] = true
				if id, err := strconv.ParseUint(e.Node, 10, 64); err == nil {
					ask = append(ask, wire.NodeID(id))
				}
			}
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range ask {
		wg.Go(func() {
			qctx, cancel := context.WithTimeout(ctx, leaderQueryWait)
			defer cancel()
			b, err := q.Query(qctx, id, question)
			var other api.Table
			if err != nil || json.Unmarshal(b, &other) != nil || nodeID(id) != other.Node {
				return // gone or old: its owners and readers stay unknown
			}
			mu.Lock()
			defer mu.Unlock()
			word.add(&other)
		})
	}
	wg.Wait()
	word.fill(t)
}

// fill sets on t's entries what their agents said: owners, a writer's
// reason and expected end, and the readers on each node's shared tickets:
// on a read-only one, those of its name; on an intent-shared one, those
// of the names below it, which a drain of its name waits for as well.
func (w *agentWord) fill(t *api.Table) {
	below := map[string]map[string]*levelReaders{} // node → level → its readers below: each node's worked out once
	for i := range t.Locks {
		l := &t.Locks[i]
		for j := range l.Entries {
			e := &l.Entries[j]
			e.Owner = w.owners[e.Request]
			if h, ok := w.holds[e.Request]; ok {
				e.Reason, e.ETA = h.Reason, h.ETA
				e.GraceEnd, e.Revoked, e.Preview = h.GraceEnd, h.Revoked, h.Preview
			}
			readers, known := w.readers[e.Node]
			if !known || !e.Active {
				continue
			}
			switch e.Mode {
			case semaphore.ReadOnly.String():
				e.Readers = new(readers[l.Name])
			case semaphore.IntentShared.String():
				levels, ok := below[e.Node]
				if !ok {
					levels = readersBelow(readers)
					below[e.Node] = levels
				}
				e.Readers = new(0)
				if lr := levels[l.Name]; lr != nil {
					*e.Readers, e.ReadersBelow = lr.total, maps.Clone(lr.byChild)
				}
			}
		}
	}
}

// levelReaders is one node's readers below one level: in all, and by the
// level directly below it that they are at or under.
type levelReaders struct {
	total   int
	byChild map[string]int
}

// readersBelow counts one node's readers (by name, as SharedReaders) below
// every level they are under: each name's readers under each proper
// parent of it by semaphore.NamePath, not by a string prefix, so that
// /site/shopping is not under /site/shop. A name NamePath refuses is
// under nothing.
func readersBelow(readers map[string]int) map[string]*levelReaders {
	out := map[string]*levelReaders{}
	for name, n := range readers {
		path, err := semaphore.NamePath(name)
		if err != nil || n <= 0 {
			continue
		}
		for i := 0; i+1 < len(path); i++ {
			lr := out[path[i]]
			if lr == nil {
				lr = &levelReaders{byChild: map[string]int{}}
				out[path[i]] = lr
			}
			lr.total += n
			lr.byChild[path[i+1]] += n
		}
	}
	return out
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// mergeTables merges leaders' tables: every request any of them lists,
// with the highest ticket any has (and that answer's state), marks any has
// set, the earliest since and the latest until; Leaders counts the tables
// that list it.
func mergeTables(ts []*api.Table) api.Table {
	out := api.Table{Locks: []api.Lock{}}
	byName := map[string]*api.Lock{}
	entries := map[string]map[string]*api.Entry{}
	for _, t := range ts {
		out.MergedFrom = append(out.MergedFrom, t.Node)
		for _, l := range t.Locks {
			m := byName[l.Name]
			if m == nil {
				m = &api.Lock{Name: l.Name}
				byName[l.Name], entries[l.Name] = m, map[string]*api.Entry{}
			}
			m.HighWater = max(m.HighWater, l.HighWater)
			for _, e := range l.Entries {
				have := entries[l.Name][e.Request]
				if have == nil {
					e.Leaders = 1
					entries[l.Name][e.Request] = &e
					continue
				}
				have.Leaders++
				have.NodeName = cmp.Or(have.NodeName, e.NodeName)
				if e.Ticket > have.Ticket {
					have.Ticket, have.State, have.Mode = e.Ticket, e.State, e.Mode
				}
				have.Active = have.Active || e.Active
				have.Holder = have.Holder || e.Holder
				if e.Since.Before(have.Since) {
					have.Since = e.Since
				}
				if e.Until.After(have.Until) {
					have.Until = e.Until
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		l := byName[name]
		l.Entries = []api.Entry{}
		for _, e := range entries[name] {
			l.Entries = append(l.Entries, *e)
		}
		slices.SortFunc(l.Entries, func(a, b api.Entry) int {
			return cmp.Or(cmp.Compare(bakeryKey(a.Ticket), bakeryKey(b.Ticket)), cmp.Compare(a.Request, b.Request))
		})
		out.Locks = append(out.Locks, *l)
	}
	slices.Sort(out.MergedFrom)
	return out
}

// tokenRequest is the request holding ticket token on name, in the
// cluster's table (a quorum of the leaders' tables).
func (n *Node) tokenRequest(ctx context.Context, q querier, name string, token uint64) (string, error) {
	if err := validName(name); err != nil {
		return "", err
	}
	t, err := n.ClusterLocks(ctx, q, name)
	if err != nil {
		return "", err
	}
	for _, l := range t.Locks {
		if l.Name != name {
			continue
		}
		for _, e := range l.Entries {
			if e.Ticket == token {
				return e.Request, nil
			}
		}
	}
	return "", fmt.Errorf("%w: no ticket %d on %q in the cluster's table", semaphore.ErrUnknownLease, token, name)
}

// ClusterAudit is the audit notes of every member the view lists alive,
// this node's among them, newest first (at most auditLogLen): the
// operators' actions and write locks through any agent. Best effort: an
// agent that does not answer in time is left out.
func (n *Node) ClusterAudit(ctx context.Context, q querier) ([]AuditNote, error) {
	st, err := n.Status(ctx)
	if err != nil {
		return nil, err
	}
	self := n.Audit()
	for i := range self {
		self[i].Node = cmp.Or(st.Name, st.Node)
	}
	out := self
	question, _ := json.Marshal(tableQuery{Audit: true})
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range st.Members {
		id, err := strconv.ParseUint(m.Node, 10, 64)
		if err != nil || m.Node == st.Node || !m.Alive {
			continue
		}
		wg.Go(func() {
			qctx, cancel := context.WithTimeout(ctx, leaderQueryWait)
			defer cancel()
			b, err := q.Query(qctx, wire.NodeID(id), question)
			var notes []AuditNote
			if err != nil || json.Unmarshal(b, &notes) != nil {
				return // gone, or from before audit notes
			}
			for i := range notes {
				notes[i].Node = cmp.Or(m.Name, m.Node)
			}
			mu.Lock()
			defer mu.Unlock()
			out = append(out, notes...)
		})
	}
	wg.Wait()
	slices.SortStableFunc(out, func(a, b AuditNote) int { return b.At.Compare(a.At) })
	return out[:min(len(out), auditLogLen)], nil
}

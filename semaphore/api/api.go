package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Status is what `sluice status` shows of one node.
type Status struct {
	Node string `json:"node"`
	// Name is the node's --name (its hostname by default).
	Name  string `json:"name,omitempty"`
	Ready bool   `json:"ready"`
	// State is LOCK_READY or NO_LOCK; Reason says why not ready.
	State       string     `json:"state"`
	Reason      string     `json:"reason,omitempty"`
	View        ViewStatus `json:"view"`
	Leader      bool       `json:"leader"`
	Serving     bool       `json:"serving"`
	Coordinator bool       `json:"coordinator"`
	Incarnation uint32     `json:"incarnation"`
	// Cluster is the cluster's id; CheckedIn says whether a majority of
	// the other members confirmed this node's life (it votes and serves
	// only then).
	Cluster   string      `json:"cluster"`
	CheckedIn bool        `json:"checked_in"`
	Members   []Member    `json:"members"`
	Handoff   HandoffInfo `json:"handoff"`
	Leases    int         `json:"leases"`
	Stats     NodeStats   `json:"stats"`
	Core      CoreStats   `json:"core"`
}

// ViewStatus is a view in JSON.
type ViewStatus struct {
	Epoch       uint64   `json:"epoch"`
	Leaders     []string `json:"leaders"`
	PrevEpoch   uint64   `json:"prev_epoch,omitempty"`
	PrevLeaders []string `json:"prev_leaders,omitempty"`
}

// Member is one node as the election sees it.
type Member struct {
	Node string `json:"node"`
	ID   string `json:"id"` // priority|random|address|pid|name
	// Name is the node's --name (its hostname by default), from ID.
	Name   string `json:"name,omitempty"`
	Alive  bool   `json:"alive"`
	Leader bool   `json:"leader"`
	Off    bool   `json:"off,omitempty"`
	// Voter: a member of the current view, which votes in elections.
	Voter bool `json:"voter"`
}

// HandoffInfo is the node's handoff state.
type HandoffInfo struct {
	Complete uint64   `json:"complete"`
	Fence    uint64   `json:"fence"`
	Pending  []uint64 `json:"pending,omitempty"`
}

// Table is what `sluice locks` shows.
type Table struct {
	// Node is the node that answered; Leader says whether Locks is its
	// replica table (only leaders hold one).
	Node   string `json:"node"`
	Leader bool   `json:"leader"`
	// NodeName is the answering node's --name (its hostname by default).
	NodeName string `json:"node_name,omitempty"`
	// MergedFrom are the leaders whose tables Locks merges (a quorum of
	// the view's), asked by any agent; Note says why there is no merge
	// (fewer than a quorum answered) and Locks is then this node's own.
	MergedFrom []string `json:"merged_from,omitempty"`
	Note       string   `json:"note,omitempty"`
	Locks      []Lock   `json:"locks"`
	// Requests are this node's own clients' requests.
	Requests []OwnRequest `json:"requests"`
	// SharedReaders counts, per name, the readers that hold on this
	// node's shared read ticket of that name: each client's lease (their
	// requests are in Requests too, phase "held-shared", except in answers
	// to other agents), and for a lease lent to a process's page views
	// (the middleware, sluice proxy) those page views, as its client last
	// said (OwnRequest.PageViews; one while it said nothing or none). A
	// drain waits for all of them.
	SharedReaders map[string]int `json:"shared_readers,omitempty"`
}

// Lock is one name in a leader's table.
type Lock struct {
	Name      string  `json:"name"`
	HighWater uint64  `json:"high_water"`
	Entries   []Entry `json:"entries"`
}

// ReadersHolding counts the readers that hold l's name: each plain reader
// granted, and the readers on each node's shared read ticket (one when its
// agent did not say). A drain waits for them.
func (l Lock) ReadersHolding() int { return l.readersOn("read-only") }

// ReadersBelowHolding counts the readers of the names below l's, with
// nested names: the readers on each node's INTENT_SHARED ticket of it (its
// agent's count, one when it did not say), and each reader's own. A drain
// of l's name waits for them too.
func (l Lock) ReadersBelowHolding() int { return l.readersOn("intent-shared") }

// readersOn counts the readers the holders of mode stand for.
func (l Lock) readersOn(mode string) int {
	n := 0
	for _, e := range l.Entries {
		switch {
		case e.Mode != mode || !e.Holder:
		case e.Active && e.Readers != nil:
			n += *e.Readers
		default:
			n++
		}
	}
	return n
}

// Entry is one request of a name, in ticket order (the bakery's order).
type Entry struct {
	Request string `json:"request"`
	Node    string `json:"node"`
	// NodeName is the name of the request's node (its --name, the
	// hostname by default), as the answering agent's membership knows it;
	// empty when it does not.
	NodeName string `json:"node_name,omitempty"`
	Ticket   uint64 `json:"ticket"`
	Mode     string `json:"mode"`
	State    string `json:"state"`
	Active   bool   `json:"active,omitempty"`
	// Holder: the mode's rule admits it over the entries ahead of it: it
	// holds the lock, or is being granted it. The others wait.
	Holder bool `json:"holder"`
	// Since is when this leader learned of the request; Until is when it
	// forgets it by itself (a granted lease ends before).
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Leaders, in a merged table, is how many of the leaders list it.
	Leaders int `json:"leaders,omitempty"`
	// Owner, in a merged table, is what the request's client said of
	// itself (AcquireBody.Owner), asked of the request's agent.
	Owner string `json:"owner,omitempty"`
	// Reason and ETA, in a merged table, are what a writer's client said
	// of its hold (AcquireBody): why, and when it expects to be done.
	Reason string    `json:"reason,omitempty"`
	ETA    time.Time `json:"eta,omitzero"`
	// GraceEnd is when a drain's grace ends (AcquireBody.ReadersGrace),
	// Revoked how many readers its client revoked since, and Preview its
	// preview token's hash, in a merged table.
	GraceEnd time.Time `json:"grace_end,omitzero"`
	Revoked  int       `json:"revoked,omitempty"`
	Preview  string    `json:"preview,omitempty"`
	// Readers, for a node's shared read ticket (Active read-only) in a
	// merged table, is how many of that node's clients hold on it, as its
	// agent answered; for its shared intent ticket (Active intent-shared),
	// how many hold on names strictly below this one (semaphore.NamePath),
	// whom a drain of this name waits for too. Nil when the agent did not
	// answer (gone, or an older version).
	Readers *int `json:"readers,omitempty"`
	// ReadersBelow splits an intent-shared entry's Readers by the level
	// directly below the name: "/site/shop" on /site counts the readers of
	// /site/shop and of every name below it. Nil when Readers is nil or 0.
	ReadersBelow map[string]int `json:"readers_below,omitempty"`
}

// OwnRequest is one request of this node's clients.
type OwnRequest struct {
	Request string    `json:"request"`
	Name    string    `json:"name"`
	Mode    string    `json:"mode"`
	Phase   string    `json:"phase"`
	Ticket  uint64    `json:"ticket,omitempty"`
	Since   time.Time `json:"since"`
	Expires time.Time `json:"expires,omitzero"`
	Owner   string    `json:"owner,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	ETA     time.Time `json:"eta,omitzero"`
	// GraceEnd, Revoked and Preview: as Entry's.
	GraceEnd time.Time `json:"grace_end,omitzero"`
	Revoked  int       `json:"revoked,omitempty"`
	Preview  string    `json:"preview,omitempty"`
	// PageViews, on a reader's lease that its client lends to its
	// process's page views (the middleware, sluice proxy), is how many of
	// them run on it, as the client last said (POST /v1/page-views), at
	// PageViewsAt; nil when it never said.
	PageViews   *int      `json:"page_views,omitempty"`
	PageViewsAt time.Time `json:"page_views_at,omitzero"`
}

// PageViewsBody is the body of POST /v1/page-views: a client that lends
// a reader's lease to its process's page views says how many run on it
// now, so that tables and drains count them, not the lease alone. The
// answer is the body back.
type PageViewsBody struct {
	Lease string `json:"lease"`
	// Name, optional, is the lease's name (as LeaseBody's).
	Name string `json:"name,omitempty"`
	// InFlight is how many page views run on the lease now, 0 to
	// MaxPageViews.
	InFlight int `json:"in_flight"`
}

// MaxPageViews bounds PageViewsBody.InFlight.
const MaxPageViews = 1 << 20

// NodeStats counts what the runtime did, for status and metrics.
type NodeStats struct {
	Ticks       uint64 `json:"ticks"`
	MessagesIn  uint64 `json:"messages_in"`
	MessagesOut uint64 `json:"messages_out"`
	Dropped     uint64 `json:"dropped"`
	Rejected    uint64 `json:"rejected"`
	Persists    uint64 `json:"persists"`
	Views       uint64 `json:"views"`
}

// CoreStats counts what the lock core did (core.Stats, as status shows
// it).
type CoreStats struct {
	BadMessages      uint64 `json:"bad_messages"`
	WrongTarget      uint64 `json:"wrong_target"`
	StaleEpoch       uint64 `json:"stale_epoch"`
	StaleIncarnation uint64 `json:"stale_incarnation"`
	StaleReplies     uint64 `json:"stale_replies"`
	Granted          uint64 `json:"granted"`
	Failed           uint64 `json:"failed"`
	Expired          uint64 `json:"expired"`
	Retransmits      uint64 `json:"retransmits"`
	DoorwayRestarts  uint64 `json:"doorway_restarts"`
	TicketRaises     uint64 `json:"ticket_raises"`
	// OneRoundDoorways counts doorways done in one round: the node
	// proposed the name's next number with its choosing flag, and a
	// quorum of leaders took it.
	OneRoundDoorways uint64 `json:"one_round_doorways"`
	// LongDoorways counts doorways given up for a fresh one (a new id)
	// because they lasted longer than the bound (ten seconds): leaders
	// out of reach, or overloaded.
	LongDoorways uint64 `json:"long_doorways"`
	// ShareBypasses counts page views that went through the bakery by
	// themselves because the agent's shared read ticket of their name
	// could not be had at once (leaders slow or out of reach): a steady
	// rise means page views cost the leaders' rounds.
	ShareBypasses uint64 `json:"share_bypasses"`
	NotServing    uint64 `json:"not_serving"`
	Handoffs      uint64 `json:"handoffs"`
	// RestoredDropped counts tickets restored from the store that fewer
	// than a quorum of the view's leaders held (released while away).
	RestoredDropped uint64 `json:"restored_dropped"`
}

// The defaults of an acquire that leaves them out: how long it waits for
// the grant, and how long the lease lasts. A timeout of 0 given is an
// answer at once (a try), in both protocols.
const (
	DefaultTimeout  = 30 * time.Second
	DefaultDuration = time.Minute
)

// AcquireBody is the body of POST /v1/acquire.
type AcquireBody struct {
	Name string `json:"name,omitempty"`
	// Names, instead of Name, takes several names together, all or
	// nothing (at most MaxNames, each once): the other fields apply to
	// each, the timeout to the whole call. The answer is a LeaseSet.
	Names    []string `json:"names,omitempty"`
	Mode     string   `json:"mode,omitempty"`     // default exclusive
	Timeout  Span     `json:"timeout,omitempty"`  // default 30s
	Duration Span     `json:"duration,omitempty"` // default 1m
	Grace    Span     `json:"grace,omitempty"`    // default 0
	Quiet    Span     `json:"quiet,omitempty"`
	Limit    int      `json:"limit,omitempty"`
	Try      bool     `json:"try,omitempty"`
	// Owner says who holds it, for operators' tables ("alice@web-1 pid
	// 4242: deploy.sh"): free text, at most 256 bytes, no control
	// characters. `sluice lock` sends user@host, pid and command line.
	Owner string `json:"owner,omitempty"`
	// Reason and ETA are a writer's word for visitors and operators: why
	// (free text as Owner, shown to everyone) and how long from the call
	// it expects to hold. The maintenance pages show them.
	Reason string `json:"reason,omitempty"`
	ETA    Span   `json:"eta,omitempty"`
	// ReadersGrace is how long a drain lets the readers that hold go on
	// before it revokes them (sluice drain --grace), from the call: shown
	// to operators; the drain's client does the revoking.
	ReadersGrace Span `json:"readers_grace,omitempty"`
	// Preview is the SHA-256, in lowercase hex, of the drain's preview
	// token: while this writer holds the name, the middleware and sluice
	// proxy serve the requests that carry the token (the operator's check
	// of the new version). Only the hash travels; the token stays with
	// the drain.
	Preview string `json:"preview,omitempty"`
}

// LeaseBody names a lease (release, renew).
type LeaseBody struct {
	Lease string `json:"lease"`
	// Name, optional on a release, is the lease's name: a lease of that
	// id on another name is not the caller's (ids repeat after a node's
	// disk was lost), and the answer is unknown_lease.
	Name string `json:"name,omitempty"`
}

// ForceBody is the body of POST /v1/force-unlock.
type ForceBody struct {
	Name  string `json:"name"`
	Lease string `json:"lease,omitempty"`
	Token uint64 `json:"token,omitempty"`
	// By says who asked (user@host), for the agent's log.
	By string `json:"by,omitempty"`
	// Readers drops every READ_ONLY holder of Name instead (Lease and
	// Token unset): a drain whose grace is over. A writer of Name may ask
	// it, not only an operator.
	Readers bool `json:"readers,omitempty"`
}

// LeaseJSON is a lease in answers (acquire, renew).
type LeaseJSON struct {
	Lease string `json:"lease"`
	Name  string `json:"name"`
	Mode  string `json:"mode"`
	Token uint64 `json:"token"`
	// TTL is how long the lease lasts, counted from when the client sent
	// the call this answers: count it on a monotonic clock from the send,
	// never from the answer's arrival, and stop acting under the lease
	// when it runs out. TTL is a Go duration string; TTLMillis the same
	// in whole milliseconds (rounded down), for clients in other languages.
	TTL       string `json:"ttl"`
	TTLMillis int64  `json:"ttl_ms"`
	// Expires is the agent's wall-clock estimate of the end, for display
	// only: a clock step moves it.
	Expires time.Time `json:"expires"`
}

// MaxNames is the most names one acquire takes together.
const MaxNames = 64

// LeaseSet answers an acquire of several names: their leases, one fencing
// token each, in the order the agent took them (byte order of the names,
// the same for every caller, so that two such acquires never wait for
// each other in a cycle). Each is a lease of its own to renew and release.
type LeaseSet struct {
	Leases []LeaseJSON `json:"leases"`
}

// Span is a duration in a request body: a Go duration string ("300ms",
// "30s", "1m") or a number of milliseconds (5000), which is what most
// languages' JSON has at hand. It is kept as the string the duration
// parser reads ("5000ms" for 5000).
type Span string

// UnmarshalJSON takes a string, or a number of milliseconds.
func (s *Span) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = Span(v)
		return nil
	}
	var ms json.Number
	if err := json.Unmarshal(b, &ms); err != nil {
		return fmt.Errorf("a duration is a string (\"30s\") or a number of milliseconds, not %s", b)
	}
	*s = Span(ms.String() + "ms")
	return nil
}

// ParseSpan reads a TTL: a Go duration string, not negative.
func ParseSpan(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %s", s)
	}
	return d, nil
}

// StatusJSON is the answer of GET /v1/status: the node's status and,
// when the agent has a mesh, the mesh's view of the other peers (an empty
// list when it knows none; no key without a mesh).
type StatusJSON struct {
	Status
	Mesh []MeshPeer `json:"mesh,omitzero"`
}

// ErrorJSON is every error answer. Error is a code of the table in
// core/codes ("draining", "bad_request", ...).
type ErrorJSON struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// Released is the answer of POST /v1/release: the lease given back.
type Released struct {
	Released string `json:"released"`
}

// ForceUnlocked is the answer of POST /v1/force-unlock: the request ids
// the leaders dropped from name.
type ForceUnlocked struct {
	Name     string   `json:"name"`
	Released []string `json:"released"`
	// Readers, for a revocation of readers, is how many readers those
	// requests were: a node's shared read ticket counts the readers on it
	// (as its agent answered; 1 when it did not).
	Readers int `json:"readers,omitempty"`
}

// Event is something that happened to a lease, for watchers.
type Event struct {
	Lease string `json:"lease"`
	Name  string `json:"name"`
	// Kind: granted, unlocking, unlocked, renewed, renew-failed, failed;
	// for a reader's lease also draining (a writer that blocks new
	// readers waits: end soon) and yield (a writer of any kind waits, or
	// the agent stops: a lease kept for many page views goes once they
	// are done).
	Kind    string    `json:"event"`
	Token   uint64    `json:"token,omitempty"`
	Expires time.Time `json:"expires,omitzero"`
	Code    string    `json:"code,omitempty"`
	// Yields, on the granted event a reader's watch starts with: this
	// agent sends yield for the lease (it holds within the agent's shared
	// read ticket). Agents before it never send yield, and leave it out.
	Yields bool `json:"yields,omitempty"`
}

// IsTCPAddr tells a host:port from a socket path.
func IsTCPAddr(addr string) bool {
	if strings.Contains(addr, "/") {
		return false
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	_, err = strconv.Atoi(port)
	return err == nil
}

// DefaultAPI is the API address shared by agent, dev and every client
// command: one Unix socket per user.
func DefaultAPI() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "sluice", "api.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("sluice-%d", os.Getuid()), "api.sock")
}

// MemberList is the answer of GET /v1/members.
type MemberList struct {
	// Node is the node that answered; Cluster the cluster's id (a hash of
	// its bootstrap members); Epoch the view the member list comes from.
	Node    string       `json:"node"`
	Cluster string       `json:"cluster"`
	Epoch   uint64       `json:"epoch"`
	Members []MemberInfo `json:"members"`
	// Codec is the oldest wire codec a voter reads, as the voters
	// announced it (one that announced none reads codec 3): what every
	// member understands. A field or message kind newer than it is not
	// sent to all; see the manual's "Upgrading sluice".
	Codec int `json:"codec,omitempty"`
	// Level is the cluster's codec, agreed with the view: the lowest codec
	// the voters offered when it was made, never lower than before. What
	// the release before cannot read waits for it, and once it is above
	// what that release reads, that release cannot take over a store
	// again. A voter offers less than it reads while started with
	// --hold-codec (Offers).
	Level int `json:"level,omitempty"`
}

// MemberInfo is one node: a voter (member), or a node of the mesh that
// takes locks without a vote.
type MemberInfo struct {
	Node    string `json:"node"`
	Peer    string `json:"peer,omitempty"`
	Name    string `json:"name,omitempty"`
	Address string `json:"address,omitempty"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
	// Reachable: the election heard from it lately. Connected: the mesh
	// holds a connection to it.
	Reachable bool `json:"reachable"`
	Connected bool `json:"connected"`
	Off       bool `json:"off,omitempty"`
	// Version is the release the node announced; Codec the newest wire
	// codec it reads (0: not known yet).
	Version string `json:"version,omitempty"`
	Codec   int    `json:"codec,omitempty"`
	// Offers is the codec its hellos offer the cluster's level (0: not
	// heard yet).
	Offers int `json:"offers,omitempty"`
}

// MeshPeer is a peer as the mesh knows it.
type MeshPeer struct {
	Node      string   `json:"node"`
	Peer      string   `json:"peer"`
	Name      string   `json:"name,omitempty"`
	Addrs     []string `json:"addrs,omitempty"`
	Connected bool     `json:"connected"`
	Version   string   `json:"version,omitempty"`
	Codec     int      `json:"codec,omitempty"`
}

// MembersBody is POST /v1/members: add one node or remove one member,
// named by peer id or node number.
type MembersBody struct {
	Add    string `json:"add,omitempty"`
	Remove string `json:"remove,omitempty"`
}

// StoreVouched is the answer of POST /v1/members/vouch: the operator's
// word that the agent's store is its own is taken; CheckedIn says whether
// the node checked in with it at once, Reason why not yet.
type StoreVouched struct {
	Node      string `json:"node"`
	CheckedIn bool   `json:"checked_in"`
	Reason    string `json:"reason,omitempty"`
}

// MembersChanged is the answer of POST /v1/members: the change is in the
// valid view of Epoch.
type MembersChanged struct {
	Epoch   uint64     `json:"epoch"`
	Change  string     `json:"change"`
	Members MemberList `json:"members"`
}

// OpenAPI is the OpenAPI 3 document of the local API (openapi.json beside
// this file), which the agent serves at GET /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

package daemon

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/semaphore/api"
)

// The local API: HTTP/JSON, on a Unix socket and optionally
// on a loopback TCP address with a bearer token.
//
//	POST /v1/acquire       {"name","mode","timeout","duration","grace","quiet","limit","try"} → lease
//	                       {"names":[...], ...} → {"leases":[...]}: several names, all or nothing
//	POST /v1/release       {"lease","name"}
//	POST /v1/renew         {"lease","name"} → lease (a lease from before the agent restarted too)
//	POST /v1/page-views    {"lease","name","in_flight"}: the page views on a reader's lease lent to them
//	GET  /v1/watch?lease=ID   newline-delimited JSON events until the lease ends
//	GET  /v1/locks?prefix=P   the leader's table and this node's requests
//	GET  /v1/status        view, epoch, leaders, members, LOCK_READY or NO_LOCK
//	POST /v1/force-unlock  {"name","lease" or "token"}
//	GET  /v1/members       voters and other nodes of the cluster
//	POST /v1/members       {"add": ID} or {"remove": ID}: one membership change
//	POST /v1/members/vouch the operator's word that this node's store is its own
//	GET  /metrics          Prometheus text format
//
// Durations are Go duration strings ("30s", "1m30s") or numbers of
// milliseconds (30000); node ids are strings. Errors are {"error": code,
// "message": text}, code and status from the table in core/codes.

// maxBody caps request bodies: a name is at most 1 KiB.
const maxBody = 64 << 10

// APIConfig configures the API handler.
type APIConfig struct {
	Node *Node
	// Token, when set, must come as "Authorization: Bearer <Token>" (or
	// another token Access knows). Set it for TCP listeners; on Unix
	// sockets the kernel names the caller (ConnContext).
	Token string
	// Access, when set, gives callers their roles: a TCP caller by its
	// token, a socket's by WithCaller in the request's context. Nil: every
	// caller may do everything (the agent always sets it).
	Access *Access
	// Peers adds the mesh's other peers, with their connection state, to
	// /v1/status. Mesh lists the mesh's peers, this node's too, for
	// /v1/members; PeerNode turns a peer id into a node id. All optional.
	Peers    func() []api.MeshPeer
	Mesh     func() []api.MeshPeer
	PeerNode func(string) (wire.NodeID, error)
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics, when set, is served at GET /metrics (Prometheus text format).
	Metrics *prometheus.Registry
	// Cluster, when set, asks the view's leaders for their tables: GET
	// /v1/locks merges a quorum of them (?local=true: this node's alone).
	Cluster querier
}

type apiServer struct {
	cfg APIConfig
	log *slog.Logger
}

// NewAPI returns the API's handler.
func NewAPI(cfg APIConfig) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &apiServer{cfg: cfg, log: cfg.Logger}
	mux := http.NewServeMux()
	for _, e := range []struct {
		method, path string
		h            http.HandlerFunc
	}{
		{"POST", "/v1/acquire", a.acquire}, {"POST", "/v1/release", a.release}, {"POST", "/v1/renew", a.renew},
		{"POST", "/v1/page-views", a.pageViews},
		{"GET", "/v1/watch", a.watch}, {"GET", "/v1/locks", a.locks}, {"GET", "/v1/status", a.anyRole("status", a.status)},
		{"POST", "/v1/force-unlock", a.force},
		{"GET", "/v1/members", a.anyRole("members", a.members)},
		{"POST", "/v1/members/vouch", a.operator("vouch", "vouch for this node's store", a.vouch)},
	} {
		mux.HandleFunc(e.method+" "+e.path, e.h)

		// Any other method: the more specific pattern above wins for the
		// right one.
		mux.HandleFunc(e.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", e.method)
			refuse(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s needs %s, not %s", e.path, e.method, r.Method))
		})
	}
	if cfg.Metrics != nil {
		metrics := promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)})
		mux.HandleFunc("GET /metrics", a.anyRole("metrics", metrics.ServeHTTP))
	}
	mux.HandleFunc("POST /v1/members", a.operator("members_change", "change the membership", a.changeMembers))
	mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(api.OpenAPI)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		refuse(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	if cfg.Token == "" {
		return mux
	}
	want := []byte("Bearer " + cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cfg.Access != nil {
			// The token names the caller, and so its roles.
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			c, known := cfg.Access.Bearer(tok)
			if !ok || !known {
				fail(w, fmt.Errorf("%w: missing or wrong bearer token", codes.ErrUnauthorized))
				return
			}
			mux.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), c)))
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			fail(w, fmt.Errorf("%w: missing or wrong bearer token", codes.ErrUnauthorized))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// anyRole serves h to callers with any role (status, members, metrics).
func (a *apiServer) anyRole(action string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c, ok := callerFrom(r.Context()); ok && c.top() == RoleNone {
			fail(w, a.cfg.Node.refused(c, action, c.forbidden("read the "+action, "", RoleFrontend)))
			return
		}
		h(w, r)
	}
}

// operator serves h to operators only.
func (a *apiServer) operator(action, what string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c, ok := callerFrom(r.Context()); ok && !c.Operator() {
			fail(w, a.cfg.Node.refused(c, action, c.forbidden(what, "", RoleOperator)))
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers err with the code and status the table gives it.
func fail(w http.ResponseWriter, err error) {
	r := codes.Of(err)
	writeJSON(w, r.Status, api.ErrorJSON{Error: r.Code, Message: err.Error()})
}

// refuse answers a request that HTTP itself refuses (no such path, a wrong
// method, a body too large or unreadable): bad_request, with the status
// that says which.
func refuse(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, api.ErrorJSON{Error: codes.BadRequest, Message: msg})
}

// decode reads one JSON object, refusing unknown fields, trailing data and
// bodies over maxBody.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", maxBody))
		} else {
			refuse(w, http.StatusBadRequest, "reading the body: "+err.Error())
		}
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		refuse(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return false
	}
	if dec.More() {
		refuse(w, http.StatusBadRequest, "bad JSON: data after the object")
		return false
	}
	return true
}

func leaseJSON(l Lease) api.LeaseJSON {
	return api.LeaseJSON{Lease: l.ID, Name: l.Name, Mode: l.Mode.String(), Token: l.Token, TTL: l.TTL.String(), TTLMillis: l.TTL.Milliseconds(), Expires: l.Expires}
}

func (a *apiServer) acquire(w http.ResponseWriter, r *http.Request) {
	var b api.AcquireBody
	if !decode(w, r, &b) {
		return
	}
	req, err := ParseAcquire(b)
	if err != nil {
		fail(w, err)
		return
	}
	if b.Names != nil {
		a.acquireAll(w, r, b, req)
		return
	}
	// The client hanging up cancels r.Context(): Acquire abandons.
	l, err := a.cfg.Node.Acquire(r.Context(), req)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseJSON(l))
}

// acquireAll is an acquire of several names (api.AcquireBody.Names).
func (a *apiServer) acquireAll(w http.ResponseWriter, r *http.Request, b api.AcquireBody, req Request) {
	if b.Name != "" {
		fail(w, fmt.Errorf("%w: name and names exclude each other", codes.ErrInvalid))
		return
	}
	if len(b.Names) > api.MaxNames { // before a Request is made for each
		fail(w, fmt.Errorf("%w: %d names, at most %d in one acquire", codes.ErrInvalid, len(b.Names), api.MaxNames))
		return
	}
	rs := make([]Request, len(b.Names))
	for i, name := range b.Names {
		rs[i] = req
		rs[i].Name = name
	}
	ls, err := a.cfg.Node.AcquireAll(r.Context(), rs)
	if err != nil {
		fail(w, err)
		return
	}
	out := api.LeaseSet{Leases: make([]api.LeaseJSON, len(ls))}
	for i, l := range ls {
		out.Leases[i] = leaseJSON(l)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *apiServer) release(w http.ResponseWriter, r *http.Request) {
	var b api.LeaseBody
	if !decode(w, r, &b) {
		return
	}
	if err := a.cfg.Node.Release(r.Context(), b.Lease, b.Name); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Released{Released: b.Lease})
}

func (a *apiServer) renew(w http.ResponseWriter, r *http.Request) {
	var b api.LeaseBody
	if !decode(w, r, &b) {
		return
	}
	l, err := a.cfg.Node.RenewHeld(r.Context(), b.Lease, Held{Name: b.Name})
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseJSON(l))
}

func (a *apiServer) pageViews(w http.ResponseWriter, r *http.Request) {
	var b api.PageViewsBody
	if !decode(w, r, &b) {
		return
	}
	if err := a.cfg.Node.PageViews(r.Context(), b.Lease, b.Name, b.InFlight); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (a *apiServer) watch(w http.ResponseWriter, r *http.Request) {
	events, err := a.cfg.Node.Watch(r.Context(), r.URL.Query().Get("lease"))
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	for e := range events {
		if enc.Encode(e) != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func (a *apiServer) locks(w http.ResponseWriter, r *http.Request) {
	prefix, local := r.URL.Query().Get("prefix"), r.URL.Query().Get("local") == "true"
	c, hasCaller := callerFrom(r.Context())
	if hasCaller {
		if err := c.may("read the table", prefix, RoleFrontend); err != nil {
			fail(w, a.cfg.Node.refused(c, "locks", err))
			return
		}
	}
	writeTable := func(t api.Table) {
		if hasCaller && !c.Operator() {
			// Owners and command lines are an operator's to read; a
			// caller sees its own.
			own, err := a.cfg.Node.leasesOf(r.Context(), c)
			if err != nil {
				fail(w, err)
				return
			}
			hideOwners(&t, own)
		}
		writeJSON(w, http.StatusOK, t)
	}
	if a.cfg.Cluster != nil && !local {
		t, err := a.cfg.Node.ClusterLocks(r.Context(), a.cfg.Cluster, prefix)
		if err == nil {
			writeTable(t)
			return
		}
		if !errors.Is(err, codes.ErrNotReady) {
			fail(w, err)
			return
		}
		// No quorum of leaders: this node's own table, and why.
		t, lerr := a.cfg.Node.Locks(r.Context(), prefix)
		if lerr != nil {
			fail(w, lerr)
			return
		}
		t.Note = err.Error()
		writeTable(t)
		return
	}
	t, err := a.cfg.Node.Locks(r.Context(), prefix)
	if err != nil {
		fail(w, err)
		return
	}
	writeTable(t)
}

// hideOwners blanks the owners of t's requests that are not in own.
func hideOwners(t *api.Table, own map[string]bool) {
	for i := range t.Locks {
		for j := range t.Locks[i].Entries {
			if e := &t.Locks[i].Entries[j]; !own[e.Request] {
				e.Owner = ""
			}
		}
	}
	for i := range t.Requests {
		if !own[t.Requests[i].Request] {
			t.Requests[i].Owner = ""
		}
	}
}

func (a *apiServer) status(w http.ResponseWriter, r *http.Request) {
	s, err := a.cfg.Node.Status(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	out := api.StatusJSON{Status: s}
	if a.cfg.Peers != nil {
		out.Mesh = a.cfg.Peers()
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *apiServer) force(w http.ResponseWriter, r *http.Request) {
	var b api.ForceBody
	if !decode(w, r, &b) {
		return
	}
	if c, ok := callerFrom(r.Context()); ok {
		// An operator's, but a writer of the name may end its readers:
		// a drain whose grace is over.
		err := c.may("force-unlock", b.Name, RoleOperator)
		if b.Readers {
			err = c.may("revoke the readers", b.Name, RoleWriter)
		}
		if err != nil {
			fail(w, a.cfg.Node.refused(c, "force_unlock", err))
			return
		}
	}
	if b.Readers {
		if b.Lease != "" || b.Token != 0 {
			fail(w, fmt.Errorf("%w: readers takes no lease and no token", codes.ErrInvalid))
			return
		}
		reqs, readers, err := a.cfg.Node.RevokeReaders(r.Context(), a.cfg.Cluster, b.Name)
		a.cfg.Node.audit(r.Context(), "revoke_readers", b.Name, err, b.By, fmt.Sprintf("%d readers on %v", readers, reqs))
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, api.ForceUnlocked{Name: b.Name, Released: reqs, Readers: readers})
		return
	}
	lease := b.Lease
	var reqs []string
	var err error
	if lease == "" && b.Token != 0 && a.cfg.Cluster != nil {
		// The token's request, from the cluster's table: any agent can
		// resolve it, not only a leader.
		lease, err = a.cfg.Node.tokenRequest(r.Context(), a.cfg.Cluster, b.Name, b.Token)
	}
	if err == nil {
		reqs, err = a.cfg.Node.ForceUnlock(r.Context(), b.Name, lease, b.Token)
	}
	a.cfg.Node.audit(r.Context(), "force_unlock", b.Name, err, b.By,
		fmt.Sprintf("lease %q token %d released %v", lease, b.Token, reqs))
	if err != nil {
		fail(w, err)
		return
	}
	by := b.By
	if c, ok := callerFrom(r.Context()); ok {
		by = c.describe() // the kernel's word, not the request's
	}
	a.cfg.Node.forced.add(ForceNote{At: time.Now(), Name: b.Name, Released: reqs, By: by})
	writeJSON(w, http.StatusOK, api.ForceUnlocked{Name: b.Name, Released: reqs})
}

func (a *apiServer) members(w http.ResponseWriter, r *http.Request) {
	l, err := a.cfg.Node.Members(r.Context(), a.cfg.Mesh)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (a *apiServer) vouch(w http.ResponseWriter, r *http.Request) {
	var b struct{}
	if r.ContentLength != 0 && !decode(w, r, &b) {
		return
	}
	v, err := a.cfg.Node.VouchStore(r.Context())
	a.cfg.Node.audit(r.Context(), "vouch", "", err, "", "")
	if err != nil {
		fail(w, changeErr(err))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// membersChangeTimeout bounds a membership change: a few election rounds.
const membersChangeTimeout = 30 * time.Second

func (a *apiServer) changeMembers(w http.ResponseWriter, r *http.Request) {
	var b api.MembersBody
	if !decode(w, r, &b) {
		return
	}
	peerNode := a.cfg.PeerNode
	if peerNode == nil {
		peerNode = func(s string) (wire.NodeID, error) { return 0, fmt.Errorf("no mesh to resolve peer ids") }
	}
	var c election.Change
	var err error
	switch {
	case (b.Add == "") == (b.Remove == ""):
		err = fmt.Errorf("%w: give exactly one of add and remove", election.ErrBadChange)
	case b.Add != "":
		c.Add, err = ParseNodeRef(b.Add, peerNode)
	default:
		c.Remove, err = ParseNodeRef(b.Remove, peerNode)
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(r.Context(), membersChangeTimeout)
		defer cancel()
		var epoch uint64
		epoch, err = a.cfg.Node.ChangeMembers(ctx, c)
		a.cfg.Node.audit(r.Context(), "members_change", "", err, "", fmt.Sprintf("%s, epoch %d", c, epoch))
		if err == nil {
			l, _ := a.cfg.Node.Members(r.Context(), a.cfg.Mesh)
			writeJSON(w, http.StatusOK, api.MembersChanged{Epoch: epoch, Change: c.String(), Members: l})
			return
		}
	}
	a.cfg.Node.metrics.changesRefused.Inc()
	fail(w, changeErr(err))
}

package daemon

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/semaphore/api"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/election"
	"github.com/sluicehq/sluice/semaphore"
)

// The local API (DESIGN.md §9): HTTP/JSON, on a Unix socket and optionally
// on a loopback TCP address with a bearer token.
//
//	POST /v1/acquire       {"name","mode","timeout","duration","grace","quiet","limit","try"} → lease
//	POST /v1/release       {"lease"}
//	POST /v1/renew         {"lease"} → lease
//	GET  /v1/watch?lease=ID   newline-delimited JSON events until the lease ends
//	GET  /v1/locks?prefix=P   the leader's table and this node's requests
//	GET  /v1/status        view, epoch, leaders, members, LOCK_READY or NO_LOCK
//	POST /v1/force-unlock  {"name","lease" or "token"}
//	GET  /v1/members       voters and other nodes of the cluster
//	POST /v1/members       {"add": ID} or {"remove": ID}: one membership change
//	POST /v1/members/vouch the operator's word that this node's store is its own
//	GET  /metrics          Prometheus text format
//
// Durations are Go duration strings ("30s", "1m30s"). Errors are
// {"error": code, "message": text}.

// maxBody caps request bodies: a name is at most 1 KiB.
const maxBody = 64 << 10

// Limits on what a client may ask for.
const (
	maxSpan         = 30 * 24 * time.Hour // timeouts, durations, grace, quiet
	defaultDuration = time.Minute
	defaultTimeout  = 30 * time.Second
)

// APIConfig configures the API handler.
type APIConfig struct {
	Node *Node
	// Token, when set, must come as "Authorization: Bearer <Token>". Set it
	// for TCP listeners; Unix sockets rely on file permissions.
	Token string
	// Extra adds members' connection state to /v1/status (from the mesh).
	Extra func() any
	// Mesh lists the mesh's peers for /v1/members; PeerNode turns a peer
	// id into a node id. Both optional.
	Mesh     func() []api.MeshPeer
	PeerNode func(string) (wire.NodeID, error)
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics, when set, is served at GET /metrics (Prometheus text format).
	Metrics *prometheus.Registry
}

type AcquireBody = api.AcquireBody

type LeaseBody = api.LeaseBody

type ForceBody = api.ForceBody

type LeaseJSON = api.LeaseJSON

type StatusJSON = api.StatusJSON

type ErrorJSON = api.ErrorJSON

// Error codes of the API beyond the core's.
const (
	CodeBadRequest   = api.CodeBadRequest
	CodeUnknownLease = api.CodeUnknownLease
	CodeUnauthorized = api.CodeUnauthorized
	CodeUnavailable  = api.CodeUnavailable
	CodeCanceled     = api.CodeCanceled
)

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
		{"GET", "/v1/watch", a.watch}, {"GET", "/v1/locks", a.locks}, {"GET", "/v1/status", a.status},
		{"POST", "/v1/force-unlock", a.force}, {"GET", "/v1/members", a.members},
		{"POST", "/v1/members/vouch", a.vouch},
	} {
		mux.HandleFunc(e.method+" "+e.path, e.h)

		// Any other method: the more specific pattern above wins for the
		// right one.
		mux.HandleFunc(e.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", e.method)
			writeError(w, http.StatusMethodNotAllowed, CodeBadRequest, fmt.Sprintf("%s needs %s, not %s", e.path, e.method, r.Method))
		})
	}
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}))
	}
	mux.HandleFunc("POST /v1/members", a.changeMembers)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeBadRequest, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	if cfg.Token == "" {
		return mux
	}
	want := []byte("Bearer " + cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "missing or wrong bearer token")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, ErrorJSON{Error: code, Message: msg})
}

// fail answers err with its code and a fitting status.
func (a *apiServer) fail(w http.ResponseWriter, err error) {
	code, status := semaphore.Code(err), http.StatusInternalServerError
	switch {
	case errors.Is(err, core.ErrInvalid):
		status = http.StatusBadRequest
	case errors.Is(err, ErrUnknownLease):
		code, status = CodeUnknownLease, http.StatusNotFound
	case errors.Is(err, core.ErrTimedOut):
		status = http.StatusConflict // held by others for the whole wait
	case errors.Is(err, core.ErrDraining):
		status = http.StatusServiceUnavailable
	case errors.Is(err, core.ErrOverflow):
		status = http.StatusTooManyRequests
	case errors.Is(err, core.ErrLost):
		status = http.StatusGone
	case errors.Is(err, core.ErrNotReady), errors.Is(err, ErrStoreFailed), errors.Is(err, ErrStopped):
		code, status = wire.CodeNotReady.String(), http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code, status = CodeCanceled, http.StatusServiceUnavailable
	}
	if code == "" {
		code = CodeUnavailable
	}
	writeError(w, status, code, err.Error())
}

// decode reads one JSON object, refusing unknown fields, trailing data and
// bodies over maxBody.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, CodeBadRequest, fmt.Sprintf("body over %d bytes", maxBody))
		} else {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "reading the body: "+err.Error())
		}
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "bad JSON: "+err.Error())
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "bad JSON: data after the object")
		return false
	}
	return true
}

// duration parses a duration field: empty gives def; negative or over
// maxSpan is refused.
func duration(field, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", core.ErrInvalid, field, err)
	}
	if d < 0 || d > maxSpan {
		return 0, fmt.Errorf("%w: %s %s is not between 0 and %s", core.ErrInvalid, field, s, maxSpan)
	}
	return d, nil
}

// ParseAcquire turns a request body into a Request, with defaults.
func ParseAcquire(b AcquireBody) (Request, error) {
	r := Request{Name: b.Name, Try: b.Try, Limit: b.Limit, Mode: semaphore.Exclusive}
	if b.Name == "" {
		return r, fmt.Errorf("%w: empty name", core.ErrInvalid)
	}
	if len(b.Name) > wire.MaxNameLen {
		return r, fmt.Errorf("%w: name of %d bytes is over %d", core.ErrInvalid, len(b.Name), wire.MaxNameLen)
	}
	if b.Mode != "" {
		m, err := semaphore.ParseMode(b.Mode)
		if err != nil {
			return r, err
		}
		r.Mode = m
	}
	var err error
	if r.Timeout, err = duration("timeout", b.Timeout, defaultTimeout); err != nil {
		return r, err
	}
	if r.Duration, err = duration("duration", b.Duration, defaultDuration); err != nil {
		return r, err
	}
	if r.Duration == 0 {
		return r, fmt.Errorf("%w: duration must be positive", core.ErrInvalid)
	}
	if r.Grace, err = duration("grace", b.Grace, 0); err != nil {
		return r, err
	}
	if r.Quiet, err = duration("quiet", b.Quiet, 0); err != nil {
		return r, err
	}
	if b.Limit != 0 { // 0: no limit
		if _, err := semaphore.ParseLimit(b.Limit); err != nil {
			return r, err
		}
	}
	return r, nil
}

func leaseJSON(l Lease) LeaseJSON {
	return LeaseJSON{Lease: l.ID, Name: l.Name, Mode: l.Mode.String(), Token: l.Token, TTL: l.TTL.String(), TTLMillis: l.TTL.Milliseconds(), Expires: l.Expires}
}

func (a *apiServer) acquire(w http.ResponseWriter, r *http.Request) {
	var b AcquireBody
	if !decode(w, r, &b) {
		return
	}
	req, err := ParseAcquire(b)
	if err != nil {
		a.fail(w, err)
		return
	}
	// The client hanging up cancels r.Context(): Acquire abandons.
	l, err := a.cfg.Node.Acquire(r.Context(), req)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseJSON(l))
}

func (a *apiServer) release(w http.ResponseWriter, r *http.Request) {
	var b LeaseBody
	if !decode(w, r, &b) {
		return
	}
	if err := a.cfg.Node.Release(r.Context(), b.Lease); err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"released": b.Lease})
}

func (a *apiServer) renew(w http.ResponseWriter, r *http.Request) {
	var b LeaseBody
	if !decode(w, r, &b) {
		return
	}
	l, err := a.cfg.Node.Renew(r.Context(), b.Lease)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, leaseJSON(l))
}

func (a *apiServer) watch(w http.ResponseWriter, r *http.Request) {
	events, err := a.cfg.Node.Watch(r.Context(), r.URL.Query().Get("lease"))
	if err != nil {
		a.fail(w, err)
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
	t, err := a.cfg.Node.Locks(r.Context(), r.URL.Query().Get("prefix"))
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (a *apiServer) status(w http.ResponseWriter, r *http.Request) {
	s, err := a.cfg.Node.Status(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	out := StatusJSON{Status: s}
	if a.cfg.Extra != nil {
		out.Mesh = a.cfg.Extra()
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *apiServer) force(w http.ResponseWriter, r *http.Request) {
	var b ForceBody
	if !decode(w, r, &b) {
		return
	}
	if b.Name == "" || len(b.Name) > wire.MaxNameLen {
		a.fail(w, fmt.Errorf("%w: name of %d bytes", core.ErrInvalid, len(b.Name)))
		return
	}
	reqs, err := a.cfg.Node.ForceUnlock(r.Context(), b.Name, b.Lease, b.Token)
	if err != nil {
		a.fail(w, err)
		return
	}
	a.log.Warn("force-unlock by an API client", "name", b.Name, "requests", reqs, "by", b.By, "remote", r.RemoteAddr,
		"token", strconv.FormatUint(b.Token, 10))
	writeJSON(w, http.StatusOK, map[string]any{"name": b.Name, "released": reqs})
}

func (a *apiServer) members(w http.ResponseWriter, r *http.Request) {
	l, err := a.cfg.Node.Members(r.Context(), a.cfg.Mesh)
	if err != nil {
		a.fail(w, err)
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
	if err != nil {
		status, code := changeStatus(err)
		writeError(w, status, code, err.Error())
		return
	}
	a.log.Warn("store vouched for by an API client", "checked_in", v.CheckedIn, "remote", r.RemoteAddr)
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
		if epoch, err = a.cfg.Node.ChangeMembers(ctx, c); err == nil {
			a.log.Warn("membership changed by an API client", "change", c.String(), "epoch", epoch, "remote", r.RemoteAddr)
			l, _ := a.cfg.Node.Members(r.Context(), a.cfg.Mesh)
			writeJSON(w, http.StatusOK, api.MembersChanged{Epoch: epoch, Change: c.String(), Members: l})
			return
		}
	}
	a.cfg.Node.metrics.changesRefused.Inc()
	status, code := changeStatus(err)
	writeError(w, status, code, err.Error())
}

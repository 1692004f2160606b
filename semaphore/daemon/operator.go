package daemon

import (
	"cmp"
	"context"
	"crypto/subtle"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// The operator's listener (--http-listen): read-only, for people and
// monitoring on other machines. /metrics for Prometheus, /healthz (the
// agent's loop answers), /readyz (503 while NO_LOCK), and a live page of
// the cluster: members and leaders, names held and waited for, drains in
// progress, recent force-unlocks. Off loopback it needs a bearer token or
// an allow-list of client networks.

// OperatorConfig configures NewOperator.
type OperatorConfig struct {
	Node *Node
	// Cluster asks the leaders for their tables (the page shows the
	// cluster's); nil: this node's own.
	Cluster querier
	// Token, when set, must come as "Authorization: Bearer <Token>", in
	// the page's cookie, or as ?token= (a browser's first visit to /,
	// which sets the cookie and sends it on to / without the token in
	// its address; or a curl of another path).
	Token string
	// Allow, when set, are the client networks admitted (others: 403).
	Allow []netip.Prefix
}

// operatorWait bounds what one request of the operator's listener asks
// of the node and of the leaders.
const operatorWait = 5 * time.Second

// CheckOperatorListen refuses an operator's listen address that is not a
// host:port, or that is off loopback without a token or an allow-list.
func CheckOperatorListen(addr, token string, allow []netip.Prefix) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("%w: --http-listen %q is not an IP:port: %v", ErrConfig, addr, err)
	}
	if !ap.Addr().IsLoopback() && token == "" && len(allow) == 0 {
		return fmt.Errorf("%w: --http-listen %s is reachable from other machines: give --http-token-file or --http-allow", ErrConfig, addr)
	}
	return nil
}

// NewOperator is the operator listener's handler.
func NewOperator(cfg OperatorConfig) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Node.Registry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), operatorWait)
		defer cancel()
		if _, err := cfg.Node.Status(ctx); err != nil {
			http.Error(w, "the agent's loop does not answer: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), operatorWait)
		defer cancel()
		st, err := cfg.Node.Status(ctx)
		switch {
		case err != nil:
			http.Error(w, "NO_LOCK: the agent's loop does not answer", http.StatusServiceUnavailable)
		case !st.Ready:
			http.Error(w, "NO_LOCK: "+st.Reason, http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "LOCK_READY")
		}
	})
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, operatorState(r.Context(), cfg))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Token != "" && r.URL.Query().Has("token") {
			// guard checked it: keep it in a cookie the page's script
			// cannot read, out of the address bar, history and links.
			http.SetCookie(w, &http.Cookie{Name: operatorCookie, Value: cfg.Token, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		st := operatorState(r.Context(), cfg)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		tmpl := pageTemplate
		if r.URL.Query().Get("fragment") == "1" { // the script's refresh: the body alone
			tmpl = pageTemplate.Lookup("body")
		}
		if err := tmpl.Execute(w, pageData{State: st}); err != nil {
			return // the client went away
		}
	})
	return guard(cfg, mux)
}

// operatorCookie carries the token of the operator's page after a first
// visit with ?token=.
const operatorCookie = "sluice_operator"

// guard admits a request from an allowed network with the token.
func guard(cfg OperatorConfig, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(cfg.Allow) > 0 {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			ip, err := netip.ParseAddr(host)
			if err != nil || !slices.ContainsFunc(cfg.Allow, func(p netip.Prefix) bool { return p.Contains(ip.Unmap()) }) {
				http.Error(w, "forbidden: not an allowed network (--http-allow)", http.StatusForbidden)
				return
			}
		}
		if cfg.Token != "" {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if c, err := r.Cookie(operatorCookie); got == "" && err == nil {
				got = c.Value
			}
			if got == "" {
				got = r.URL.Query().Get("token")
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(cfg.Token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
				http.Error(w, "unauthorized: a bearer token is needed (--http-token-file)", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// OperatorState is what the live page shows (GET /api/state).
type OperatorState struct {
	At     time.Time  `json:"at"`
	Status api.Status `json:"status"`
	// Error says what could not be asked (the node's loop, the leaders).
	Error  string      `json:"error,omitempty"`
	Table  api.Table   `json:"table"`
	Drains []Drain     `json:"drains"`
	Forced []ForceNote `json:"forced"`
	// Kept are the write locks this agent holds for processes that are
	// gone: drains whose job failed or was killed (sluice undrain).
	Kept []KeptLock `json:"kept"`
	// Audit are the last operators' actions and write locks through
	// every agent that answered (this one's alone without a cluster),
	// newest first.
	Audit []AuditNote `json:"audit"`
}

// Drain is a writer waiting for readers to leave a name.
type Drain struct {
	Name    string `json:"name"`
	Mode    string `json:"mode"`
	Request string `json:"request"`
	// Owner is what the writer's client said of itself (user@host, pid,
	// command), and Reason and ETA its word for visitors, when its agent
	// answered.
	Owner   string    `json:"owner,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	ETA     time.Time `json:"eta,omitzero"`
	Readers int       `json:"readers_left"`
	Since   time.Time `json:"since"`
	Waited  string    `json:"waited"`
	// GraceEnd is when the drain revokes the readers still holding
	// (drain --grace), Revoked how many it revoked, as its agent said.
	GraceEnd time.Time `json:"grace_end,omitzero"`
	Revoked  int       `json:"revoked,omitempty"`
	// GraceLeft is what is left of the grace at the table's time: "" with
	// no grace, "0s" once it is over.
	GraceLeft string `json:"grace_left,omitempty"`
	// Holding: the writer holds the name (the drain is done and its job
	// runs); otherwise it waits for Readers.
	Holding bool `json:"holding"`
}

// ForceNote is one force-unlock asked through this agent.
type ForceNote struct {
	At       time.Time `json:"at"`
	Name     string    `json:"name"`
	Released []string  `json:"released"`
	By       string    `json:"by,omitempty"`
}

func operatorState(ctx context.Context, cfg OperatorConfig) OperatorState {
	ctx, cancel := context.WithTimeout(ctx, operatorWait)
	defer cancel()
	out := OperatorState{At: time.Now(), Drains: []Drain{}, Forced: cfg.Node.forced.recent(), Audit: cfg.Node.Audit()}
	st, err := cfg.Node.Status(ctx)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Status = st
	if cfg.Cluster != nil {
		out.Table, err = cfg.Node.ClusterLocks(ctx, cfg.Cluster, "")
	}
	if cfg.Cluster == nil || err != nil {
		note := ""
		if err != nil {
			note = err.Error()
		}
		out.Table, err = cfg.Node.Locks(ctx, "")
		out.Table.Note = cmp.Or(note, out.Table.Note)
		if err != nil {
			out.Error = err.Error()
		}
	}
	out.Drains = drains(out.Table, out.At)
	out.Kept, _ = cfg.Node.KeptLocks(ctx)
	if cfg.Cluster != nil {
		if notes, err := cfg.Node.ClusterAudit(ctx, cfg.Cluster); err == nil {
			out.Audit = notes
		}
	}
	return out
}

// drains finds the writers that wait for readers in t: a drain in
// progress, with the readers ahead of it that hold.
func drains(t api.Table, now time.Time) []Drain {
	out := []Drain{}
	for _, l := range t.Locks {
		for _, w := range l.Entries {
			if w.Mode == semaphore.ReadOnly.String() || w.Mode == semaphore.IntentShared.String() ||
				w.Mode == semaphore.IntentExclusive.String() || w.Ticket == 0 {
				continue // readers, and the tickets of nested names' parents
			}
			drained := w.Reason != "" || !w.ETA.IsZero() || !w.GraceEnd.IsZero() || w.Revoked != 0 || w.Preview != ""
			if w.Holder && !drained {
				continue // a plain lock, not a drain's (sluice drain always says something)
			}
			if !w.Holder && l.ReadersHolding()+l.ReadersBelowHolding() == 0 {
				continue // waiting for another writer, not a drain
			}
			d := Drain{Name: l.Name, Mode: w.Mode, Request: w.Request, Owner: w.Owner, Reason: w.Reason, ETA: w.ETA, Since: w.Since,
				Waited: now.Sub(w.Since).Round(time.Second).String(), GraceEnd: w.GraceEnd, Revoked: w.Revoked, Holding: w.Holder}
			if !w.Holder {
				d.Readers = l.ReadersHolding() + l.ReadersBelowHolding()
			}
			if !w.GraceEnd.IsZero() {
				d.GraceLeft = max(w.GraceEnd.Sub(now), 0).Round(100 * time.Millisecond).String()
			}
			out = append(out, d)
		}
	}
	return out
}

// forceLog keeps the last force-unlocks asked through this agent.
type forceLog struct {
	mu    sync.Mutex
	notes []ForceNote
}

const forceLogLen = 20

func (f *forceLog) add(n ForceNote) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notes = append(f.notes, n)
	if len(f.notes) > forceLogLen {
		f.notes = slices.Clone(f.notes[len(f.notes)-forceLogLen:])
	}
}

// recent are the notes, newest first.
func (f *forceLog) recent() []ForceNote {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.notes)
	slices.Reverse(out)
	if out == nil {
		out = []ForceNote{}
	}
	return out
}

type pageData struct {
	State OperatorState
}

//go:embed operator.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"clock": func(t time.Time) string { return t.Local().Format(time.TimeOnly) },
	"quote": func(s string) string { return fmt.Sprintf("%q", s) },
}).Parse(pageHTML))

// errOperator: the operator's listener could not start.
var errOperator = errors.New("daemon: operator listener")

// serveOperator starts the operator's listener of cfg.
func (a *Agent) serveOperator(cfg AgentConfig) error {
	lis, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("%w: %w", errOperator, err)
	}
	srv := &http.Server{Handler: NewOperator(OperatorConfig{Node: a.node, Cluster: a.host, Token: cfg.HTTPToken, Allow: cfg.HTTPAllow}),
		ReadHeaderTimeout: 10 * time.Second}
	a.operator, a.operatorAddr = srv, lis.Addr().String()
	a.wg.Go(func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("operator listener", "err", err)
		}
	})
	return nil
}

// OperatorAddr is the operator listener's address ("" when off).
func (a *Agent) OperatorAddr() string { return a.operatorAddr }

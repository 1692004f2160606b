package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/client"
)

// A one-node agent: it lists itself, and refuses changes it must not make.
func TestMembersAgent(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	l, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Cluster == "" || l.Epoch == 0 || len(l.Members) == 0 {
		t.Fatalf("members: %+v", l)
	}
	self := l.Members[0]
	if self.Node != l.Node || !self.Voter || !self.Leader || !self.Reachable {
		t.Fatalf("the only member is not this voting, leading node: %+v", l)
	}
	var ae *client.APIError
	_, err = c.RemoveMember(ctx, l.Node)
	if !errors.Is(err, client.ErrMembership) || !errors.As(err, &ae) || ae.Code != codes.BadRequest {
		t.Fatalf("removing the only member: %v, want ErrMembership (bad_request)", err)
	}
	if errors.Is(err, semaphore.ErrUnavailable) || errors.Is(err, semaphore.ErrInvalid) {
		t.Fatalf("a refusal counts as another error: %v", err)
	}
	if _, err := c.AddMember(ctx, "99"); !errors.Is(err, client.ErrMembership) {
		t.Fatalf("adding an unknown node: %v, want ErrMembership", err)
	}
	if _, err := c.AddMember(ctx, "not-a-peer"); !errors.Is(err, client.ErrMembership) {
		t.Fatalf("adding a bad id: %v, want ErrMembership", err)
	}
	after, err := c.Members(ctx)
	if err != nil || after.Epoch != l.Epoch || len(after.Members) != len(l.Members) {
		t.Fatalf("refused changes changed something: %+v -> %+v, %v", l, after, err)
	}
}

// answer is a scripted agent's answer to POST /v1/members.
type answer struct {
	status int
	code   string
	block  bool // wait for the client to hang up
}

// membersAgent serves POST /v1/members on a Unix socket with the answer
// that ans gives for each body it receives.
func membersAgent(t *testing.T, ans func(api.MembersBody) answer) *client.Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/members", func(w http.ResponseWriter, r *http.Request) {
		var b api.MembersBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Errorf("body: %v", err)
		}
		a := ans(b)
		if a.block {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		if a.status == http.StatusOK {
			id := b.Add + b.Remove
			json.NewEncoder(w).Encode(api.MembersChanged{Epoch: 9, Change: "change " + id,
				Members: api.MemberList{Node: "1", Epoch: 9, Members: []api.MemberInfo{{Node: "1", Voter: true}}}})
			return
		}
		json.NewEncoder(w).Encode(api.ErrorJSON{Error: a.code, Message: "scripted " + a.code})
	})
	return serveFake(t, mux)
}

func TestMembersChangeErrors(t *testing.T) {
	byID := map[string]answer{
		"ok":       {status: http.StatusOK},
		"bad":      {status: http.StatusBadRequest, code: codes.BadRequest},
		"conflict": {status: http.StatusConflict, code: codes.Conflict},
		"notready": {status: http.StatusServiceUnavailable, code: "not_ready"},
		"timedout": {status: http.StatusGatewayTimeout, code: codes.ChangeTimedOut},
		"broken":   {status: http.StatusInternalServerError, code: codes.Unavailable},
		"old":      {status: http.StatusMethodNotAllowed, code: codes.BadRequest},
	}
	c := membersAgent(t, func(b api.MembersBody) answer { return byID[b.Add+b.Remove] })
	ctx := ctxT(t)

	got, err := c.AddMember(ctx, "ok")
	if err != nil || got.Epoch != 9 || got.Change != "change ok" || len(got.Members.Members) != 1 {
		t.Fatalf("add: %+v, %v", got, err)
	}
	if got, err := c.RemoveMember(ctx, "ok"); err != nil || got.Change != "change ok" {
		t.Fatalf("remove: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		id         string
		want, not  error
		code       string
		wantStatus int
	}{
		{"bad", client.ErrMembership, semaphore.ErrUnavailable, codes.BadRequest, 400},
		{"conflict", client.ErrMembership, semaphore.ErrUnavailable, codes.Conflict, 409},
		{"notready", semaphore.ErrNotReady, client.ErrMembership, "not_ready", 503},
		{"timedout", semaphore.ErrChangeTimedOut, semaphore.ErrUnavailable, codes.ChangeTimedOut, 504},
		{"broken", semaphore.ErrUnavailable, client.ErrMembership, codes.Unavailable, 500},
		{"old", semaphore.ErrUnavailable, semaphore.ErrInvalid, codes.BadRequest, 405},
	} {
		for name, change := range map[string]func(context.Context, string) (api.MembersChanged, error){
			"add": c.AddMember, "remove": c.RemoveMember,
		} {
			_, err := change(ctx, tc.id)
			var ae *client.APIError
			if !errors.Is(err, tc.want) || errors.Is(err, tc.not) {
				t.Errorf("%s %s: %v, want %v and not %v", name, tc.id, err, tc.want, tc.not)
			} else if !errors.As(err, &ae) || ae.Code != tc.code || ae.Status != tc.wantStatus {
				t.Errorf("%s %s: APIError %+v, want %s (%d)", name, tc.id, ae, tc.code, tc.wantStatus)
			}
		}
	}
	if _, err := c.AddMember(ctx, ""); !errors.Is(err, semaphore.ErrInvalid) {
		t.Errorf("empty id: %v, want ErrInvalid", err)
	}
}

// The caller's deadline ends the wait, not the change: the error says it
// may still commit.
func TestMembersChangeCallerDeadline(t *testing.T) {
	c := membersAgent(t, func(api.MembersBody) answer { return answer{block: true} })
	ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	_, err := c.AddMember(ctx, "5")
	if !errors.Is(err, semaphore.ErrChangeTimedOut) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("add past the caller's deadline: %v, want semaphore.ErrChangeTimedOut and DeadlineExceeded", err)
	}
	// Already over before the call: nothing was sent.
	if _, err := c.RemoveMember(ctx, "5"); errors.Is(err, semaphore.ErrChangeTimedOut) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("remove with an expired context: %v, want DeadlineExceeded only", err)
	}
}

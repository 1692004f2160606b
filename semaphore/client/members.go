package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// Errors of membership changes.
var (
	// ErrMembership: the agent refused the change and nothing changed. The
	// *APIError (errors.As) tells why: Code bad_request for a change that
	// must not be made (unknown node, not a member, would leave no
	// quorum), conflict for one that lost to another change or met one
	// under way (try again).
	ErrMembership = errors.New("membership change refused")
)

// Members lists the cluster's voters and the other nodes the agent knows
// of, as its node sees them.
func (c *Client) Members(ctx context.Context) (api.MemberList, error) {
	var l api.MemberList
	err := c.call(ctx, "members", http.MethodGet, "/v1/members", nil, &l)
	return l, changeErr(err)
}

// AddMember makes a node a voter. id is its peer id (as `sluice id`
// prints it) or its node number (as Members shows it); the node must be
// running and connected to the cluster (started with --join). It blocks
// until the change commits, which needs a majority of the old and of the
// new members alive, or fails; the agent gives up after 30 s
// (ErrChangeTimedOut), so give ctx more than that.
func (c *Client) AddMember(ctx context.Context, id string) (api.MembersChanged, error) {
	return c.changeMembers(ctx, "members add "+id, api.MembersBody{Add: id})
}

// RemoveMember takes a voter out of the cluster's members; id as for
// AddMember. The node keeps running as a non-member until stopped.
func (c *Client) RemoveMember(ctx context.Context, id string) (api.MembersChanged, error) {
	return c.changeMembers(ctx, "members remove "+id, api.MembersBody{Remove: id})
}

// VouchStore gives the operator's word that the agent's data directory is
// its own: never restored from a copy, wiped, or taken from another
// machine. A member that cannot check in because too few other members
// are up (one of three lost for good, and this one restarted) then checks
// in with a majority of all members counting itself, so that it votes
// and the lost member's removal can commit. Vouching for a restored copy
// can grant a lock twice. ErrMembership (conflict) when the node checked
// in already.
func (c *Client) VouchStore(ctx context.Context) (api.StoreVouched, error) {
	var out api.StoreVouched
	err := c.call(ctx, "members vouch", http.MethodPost, "/v1/members/vouch", struct{}{}, &out)
	return out, changeErr(err)
}

func (c *Client) changeMembers(ctx context.Context, op string, body api.MembersBody) (api.MembersChanged, error) {
	var out api.MembersChanged
	if body.Add == "" && body.Remove == "" {
		return out, fmt.Errorf("%w: client: %s: empty id", semaphore.ErrInvalid, op)
	}
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("client: %s: %w", op, err) // nothing sent: nothing can commit
	}
	err := c.call(ctx, op, http.MethodPost, "/v1/members", body, &out)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The request may have reached the agent, which goes on with the
		// change without us.
		return out, fmt.Errorf("%w: %w", semaphore.ErrChangeTimedOut, err)
	}
	return out, changeErr(err)
}

// changeErr gives the membership answers their sentinels. APIError alone
// would not do: a bad_request refusal is no ErrInvalid of the caller's,
// a conflict needs telling apart from a refusal, and a bad_request for
// the path itself is an agent too old to serve it.
func changeErr(err error) error {
	var ae *APIError
	if !errors.As(err, &ae) {
		return err
	}
	switch {
	case ae.Status == http.StatusBadRequest && ae.Code == codes.BadRequest,
		ae.Status == http.StatusConflict && ae.Code == codes.Conflict:
		return &changeError{kind: ErrMembership, api: ae}
	case ae.Code == codes.ChangeTimedOut:
		return &changeError{kind: semaphore.ErrChangeTimedOut, api: ae}
	case ae.Code == codes.BadRequest && (ae.Status == http.StatusNotFound || ae.Status == http.StatusMethodNotAllowed):
		// An agent from before /v1/members (a rolling upgrade): not a
		// mistake of the caller, whatever code it gives.
		return &changeError{kind: semaphore.ErrUnavailable, api: ae,
			note: "the agent does not serve /v1/members (an older version?)"}
	}
	return err
}

// changeError matches its sentinel and, with errors.As, gives the
// *APIError, but does not unwrap to the APIError's own sentinel.
type changeError struct {
	kind error
	api  *APIError
	note string
}

func (e *changeError) Error() string {
	msg := e.api.Message
	if e.note != "" {
		msg = e.note + ": " + msg
	}
	return fmt.Sprintf("client: %s: %s (%s, %d): %s", e.api.Op, strings.TrimPrefix(e.kind.Error(), "client: "),
		e.api.Code, e.api.Status, msg)
}

func (e *changeError) Unwrap() error { return e.kind }

func (e *changeError) As(target any) bool {
	if t, ok := target.(**APIError); ok {
		*t = e.api
		return true
	}
	return false
}

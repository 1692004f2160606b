package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore/api"
)

// releaseWait bounds the release of the names an AcquireAll took before
// one failed: done after the call's own context may have ended.
const releaseWait = 10 * time.Second

// AcquireAll takes several names together, all or nothing: rs differ only
// in their names (the options of the first rule). The names are taken one
// by one in one canonical order, byte order, whoever asks: two calls that
// share names then never wait for each other in a cycle, as each waits
// only for a name above every one it holds. The obtain timeout counts for
// the whole call. When one name fails, the ones taken before it are let
// go before the call returns, and the error says which name failed. The
// leases come back in the order taken, one fencing token each; each is a
// lease of its own to renew and release (the Go client releases them
// together).
//
// More than api.MaxNames names, a name twice, or a name or an option
// Acquire refuses: ErrInvalid, and nothing is taken.
func (n *Node) AcquireAll(ctx context.Context, rs []Request) ([]Lease, error) {
	switch {
	case len(rs) == 0:
		return nil, fmt.Errorf("%w: no name", codes.ErrInvalid)
	case len(rs) > api.MaxNames:
		return nil, fmt.Errorf("%w: %d names, at most %d in one acquire", codes.ErrInvalid, len(rs), api.MaxNames)
	}
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b Request) int { return cmp.Compare(a.Name, b.Name) })
	for i, r := range rs {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		if i > 0 && r.Name == rs[i-1].Name {
			return nil, fmt.Errorf("%w: name %q twice in one acquire", codes.ErrInvalid, r.Name)
		}
	}
	deadline := time.Now().Add(rs[0].Timeout)
	got := make([]Lease, 0, len(rs))
	for i, r := range rs {
		if !r.Try {
			r.Timeout = time.Until(deadline)
			if r.Timeout <= 0 && i > 0 {
				n.releaseAll(ctx, got)
				return nil, fmt.Errorf("%w: the timeout ran out after %d of %d names, before %q (the ones taken were let go)",
					codes.ErrTimedOut, i, len(rs), r.Name)
			}
			r.Timeout = max(r.Timeout, 0)
		}
		l, err := n.Acquire(ctx, r)
		if err != nil {
			n.releaseAll(ctx, got)
			if i == 0 {
				return nil, fmt.Errorf("%s: %w", r.Name, err)
			}
			return nil, fmt.Errorf("%s: %w (the %d names taken before it were let go)", r.Name, err, i)
		}
		got = append(got, l)
	}
	return got, nil
}

// releaseAll lets ls go, each within releaseWait; a lease whose release
// fails ends at its expiry.
func (n *Node) releaseAll(ctx context.Context, ls []Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseWait)
	defer cancel()
	var errs []error
	for _, l := range ls {
		if err := n.Release(ctx, l.ID, l.Name); err != nil {
			errs = append(errs, fmt.Errorf("%s (lease %s): %w", l.Name, l.ID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		n.log.Warn("names taken by a failed acquire of several could not be let go; they end at their expiry", "err", err)
	}
}

package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
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
	if n.cfg.NestedNames {
		return n.acquireNested(ctx, rs)
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

// acquireNested is AcquireAll on an agent of nested names: one request
// of the core takes every name and every level above them, each once, in
// byte order (a level before the names below it), in the name's mode or,
// for a level above, its intent; a name that is also above another is
// taken in its own mode, which covers the intent (a reader's covers
// INTENT_SHARED, a writer's everything). So a name's levels are never
// taken again after names below them, which would wait, behind a drain
// of that level, for a drain that waits for the call itself. The leases
// share the request: one id, each name with its own fencing token, and a
// renewal or release of any of them is one of all.
func (n *Node) acquireNested(ctx context.Context, rs []Request) ([]Lease, error) {
	first := rs[0]
	if err := first.Validate(); err != nil {
		return nil, err
	}
	modes := map[string]wire.Mode{}
	var leaves, above []string
	for _, r := range rs {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		name, parents, err := n.nested(r.Name)
		if err != nil {
			return nil, err
		}
		if _, twice := modes[name]; twice {
			return nil, fmt.Errorf("%w: name %q twice in one acquire (as %q)", codes.ErrInvalid, name, r.Name)
		}
		modes[name] = r.Mode
		leaves = append(leaves, name)
		above = append(above, parents...)
	}
	for _, p := range above {
		if _, ok := modes[p]; !ok {
			modes[p] = first.Mode.IntentOf()
		}
	}
	names := slices.Sorted(maps.Keys(modes))
	if len(names)-1 > core.MaxParents {
		return nil, fmt.Errorf("%w: the names and the levels above them come to %d, at most %d in one acquire",
			codes.ErrInvalid, len(names), core.MaxParents+1)
	}
	slices.Sort(leaves)
	c, ok := callerFrom(ctx)
	if ok {
		for _, name := range leaves {
			if err := c.may("take a "+first.Mode.String()+" lock", name, modeRole(first.Mode)); err != nil {
				return nil, n.refused(c, "acquire", err)
			}
		}
		first.by = c
	}
	if first.ETA > 0 {
		first.etaAt = time.Now().Add(first.ETA)
	}
	if first.ReadersGrace > 0 {
		first.graceAt = time.Now().Add(first.ReadersGrace)
	}
	last := len(names) - 1
	first.Name = names[last]
	before := steps{names: names[:last], leaves: leaves}
	for _, name := range before.names {
		before.modes = append(before.modes, modes[name])
	}
	l, tokens, err := n.acquire(ctx, first, before)
	if err != nil {
		return nil, err
	}
	out := make([]Lease, 0, len(leaves))
	for _, name := range leaves {
		one := l
		one.Name = name
		if i := slices.Index(before.names, name); i >= 0 {
			one.Token = 0 // not told (a core that took no such ticket)
			if i < len(tokens) {
				one.Token = tokens[i]
			}
		}
		out = append(out, one)
	}
	if ok && first.Mode != semaphore.ReadOnly {
		n.audit(ctx, "write_lock", strings.Join(leaves, " "), nil, first.Owner,
			fmt.Sprintf("%s lease %s of %d names", first.Mode, l.ID, len(leaves)))
	}
	return out, nil
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

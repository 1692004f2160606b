package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// AcquireAll takes several names together, all or nothing, in mode with
// the options o (its timeout counts for the whole call): the agent takes
// them one by one in byte order of the names, whoever asks, so two such
// calls never wait for each other in a cycle, and lets go the ones it took
// when one fails. The leases come back in that order, one fencing token
// each, each renewed as o says; ReleaseAll lets them go together.
//
// No name, more than api.MaxNames, or a name twice: semaphore.ErrInvalid,
// and nothing is taken. An agent older than this call refuses it
// (semaphore.ErrInvalid, naming the field "names").
func (c *Client) AcquireAll(ctx context.Context, names []string, mode semaphore.Mode, o Options) ([]*Lease, error) {
	return c.acquireAll(ctx, names, mode, o, processClock())
}

func (c *Client) acquireAll(ctx context.Context, names []string, mode semaphore.Mode, o Options, clk clock) ([]*Lease, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no name", semaphore.ErrInvalid)
	}
	sent := now(clk)
	op := fmt.Sprintf("acquire %d names", len(names))
	body := api.AcquireBody{Names: names, Mode: mode.String(), Timeout: span(o.Timeout), Duration: span(o.Duration),
		Grace: span(o.Grace), Quiet: span(o.Quiet), Limit: o.Limit, Try: o.Try, Owner: o.Owner, Reason: o.Reason,
		ETA: span(o.ETA), ReadersGrace: span(o.ReadersGrace), Preview: o.Preview}
	var set api.LeaseSet
	if err := c.call(ctx, op, http.MethodPost, "/v1/acquire", body, &set); err != nil {
		return nil, err
	}
	if len(set.Leases) != len(names) {
		// Not what this call asks for: an agent that took one name of
		// the list, or garbage. Let go what it says it gave.
		ls := c.leasesOf(set, sent, mode, o, clk)
		return nil, errors.Join(fmt.Errorf("%w: asked for %d names, the agent answered %d leases", semaphore.ErrInvalid, len(names), len(ls)),
			ReleaseAll(context.WithoutCancel(ctx), ls...))
	}
	return c.leasesOf(set, sent, mode, o, clk), nil
}

func (c *Client) leasesOf(set api.LeaseSet, sent instant, mode semaphore.Mode, o Options, clk clock) []*Lease {
	out := make([]*Lease, 0, len(set.Leases))
	for _, lj := range set.Leases {
		m := mode
		if pm, err := semaphore.ParseMode(lj.Mode); err == nil {
			m = pm
		}
		out = append(out, c.newLease(lj, sent.add(ttlOf(lj)), m, o, clk))
	}
	return out
}

// ReleaseAll releases every lease, all of them even when one fails, and
// returns what failed.
func ReleaseAll(ctx context.Context, ls ...*Lease) error {
	var errs []error
	for _, l := range ls {
		if err := l.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Package client is the Go client of a sluice agent's local API, and a
// net/http middleware that puts a web frontend
// behind a READ_ONLY lock so that a writer can drain it.
//
// The contract:
//
//   - A Client talks to one agent, on its Unix socket or on a loopback
//     host:port with a bearer token. New does not dial; the first call
//     does.
//   - Acquire blocks until the agent grants the lock, refuses it, or ctx
//     ends; ending ctx abandons the request at the agent.
//   - A Lease is valid until its Expires: the TTL the agent gave for the
//     grant (or the last renewal), counted from when this client sent that
//     call, on the boot clock (it runs on while the machine is suspended;
//     a lease looks at it at least once a second), so neither the call's
//     travel, nor a step of the wall clock, nor a suspend lengthens it. Done closes when the lease is
//     lost (the agent unlocked it, a renewal found it gone, the agent
//     stopped reporting it, or its expiry passed: the last holds even when
//     the agent cannot be reached) or released; Err says which. A holder
//     must stop acting under the lease when Done closes, and should pass
//     Token to whatever it writes, so that a late write can be fenced off.
//   - A restart of the agent shorter than the lease loses nothing: the
//     client redials, watches again and renews the lease by its id and
//     name through the restarted agent, which takes it over from the
//     leaders. Done closes only when the lease is really lost: its expiry
//     passes without a renewal (an agent unreachable that long), or the
//     cluster no longer keeps it. The leaders keep the lease until its
//     expiry all the same, so nobody else gets the name meanwhile.
//   - Release gives the lease back and stops everything the lease runs
//     (its watch, renewals and timer); call it even after Done closed, to
//     free the agent's record. It is idempotent.
//   - Errors of the agent unwrap to the sentinel of their code in the
//     table the agent answers from (core/codes): the semaphore sentinels
//     (semaphore.ErrTimedOut, ErrDraining, ErrNotReady, ErrInvalid,
//     ErrOverflow, ErrLost, ErrUnknownLease and
//     ErrUnauthorized; an agent that cannot be reached, or answers a code
//     the table lacks, gives ErrUnavailable. Use errors.Is; *APIError has
//     the details.
//
// The API's "expires" is the agent's wall-clock estimate, for display;
// this package never trusts it when the agent gives a TTL.
//
// On a Unix socket, acquire, release and renew go over the agent's compact
// protocol (semaphore/api), the rest over HTTP; an agent without it is
// spoken to in HTTP only (Config.HTTPOnly asks for that). The middleware
// releases a request's lock after its handler returned without waiting
// for the agent's answer (Lease.ReleaseNoWait, the protocol's version 2);
// with an agent of version 1 it waits for the answer off the visitor's
// path, and Close waits for those releases.
//
// The middleware never lets a request run without its read lock, with
// one exception a writer grants: while a drain holds the name, a request
// carrying the drain's preview token (NewPreviewToken; only its hash
// travels with the drain's request, Options.Preview) is served under the
// drain's lease, checked against the cluster's table for each request. A
// websocket whose lease is lost gets a close frame (1001) between two of
// its frames, or its connection closed when a frame is half sent.
package client

// Package core is sluice's lock core: a quorum Lamport bakery run by the
// three leaders of a view, written as a pure, deterministic state machine.
//
// Contract (the etcd-io/raft RawNode shape):
//   - Inputs are Step (a message from a peer), Tick (one unit of time) and the
//     local proposals Acquire, Release, Renew and Abandon. Time exists only as
//     ticks; the package starts no goroutine, does no I/O, reads no clock and
//     uses no global randomness (purity_test.go checks the imports).
//   - Outputs are collected in a Ready. The caller must, in this order, make
//     Ready.Persist durable, then send Ready.Messages, then deliver
//     Ready.Events, then call Advance. A replica acknowledges a durable step
//     only in a message of a Ready whose Persist already holds that step, so
//     the order above is what makes acknowledgements mean "on disk". A
//     caller whose store makes writes durable in order may send a message
//     once the earlier writes of its scope are durable (Write.Scope,
//     Node.MessageScope: a name, the whole table's writes alone for a
//     master's requests, or everything), before other names' writes, and
//     deliver events at once (they rest on no write).
//   - Every node plays two roles. As a master it runs the phases of its own
//     requests against the view's leaders; as a replica (when it is a leader)
//     it keeps its part of the lock table and answers masters.
//
// The phases of one request:
//
//	ENTERING     choosing flag set at a quorum (not durable), and the
//	             high-water ticket read from the same answers
//	ADD_TICKET   ticket max+1 written durably at a quorum of the replicas that
//	             acked ENTERING, each still in the incarnation that acked it,
//	             and each above its high-water mark (a number refused as too
//	             low is raised and proposed again: tickets never repeat)
//	EXITING      the choosing flag is cleared, once the number is final; a
//	             replica that set the flag but missed ADD_TICKET takes the
//	             number from it, durably (no flag without a number stays)
//	ACTIVATE     granted once reports from a quorum, each made after the ticket
//	             was durable, show no earlier ticket, and no request still
//	             choosing that was there when the master first looked (for
//	             an activated soft writer: no reader still choosing at all),
//	             Admit says yes, and a quorum confirms it still has the
//	             ticket (or marked it held as it took it, with nothing
//	             ahead: the uncontended grant's two rounds)
//
// A master that knows a name's last ticket proposes the next number with
// ENTERING: a replica whose mark is below it takes it with the flag, as
// ADD_TICKET would, and a quorum of such answers ends the doorway in one
// round (the grant in one); else ADD_TICKET follows (Config.PlainDoorway
// turns this off, as in releases before 0.9).
//
// Waiting never polls: replicas push a report of a name to the masters that
// watch it whenever the name changes in a way that may matter to them (a
// master waiting with no soft writer is not told of newcomers' doorways
// until something else changes: holdsBack; Config.EagerReports turns that
// off). A slow refresh (RefreshTicks) only recovers from lost messages. Reports and the decisions on them are
// settled in Ready, once for all the input since the last one: a runtime
// that steps what its inbox holds before it calls Ready sends one report
// per watcher of a busy name, and each waiter decides once, on the newest
// reports.
//
// A waiter whose last decision was a wait on one entry (Decision.BlockedBy)
// is asked again only when a report changes that entry or its own, or it
// watches anew; Config.CheckIncremental verifies that in tests.
//
// With Config.ShareLease, a node holds one cluster-wide READ_ONLY ticket
// per name for its local readers (share.go) and grants them without a
// message; a local lease never outlives that ticket, which is let go only
// when no local reader holds it. Leaders that take a writer's ticket ask
// such tickets to yield (KindYield): refuse new local readers at once
// (priority and exclusive writers) or only let go when idle (soft ones).
// They tell the masters of plain shared tickets too, whose clients hear of
// it (AskedToYield).
// A node that let its share go for a drain, or whose share's try a
// leader refused with draining, refuses its shared tries itself until
// those leaders say the drain is over (a KindYield of YieldNone) or
// Config.DrainMemo ticks pass.
//
// When the view changes (SetView), each leader of the new view takes the
// lock table over from a quorum of the previous view's leaders, who fence
// themselves first, and serves only then (handoff.go). Requests that were
// not granted restart their doorway at the new epoch under a fresh wire id;
// their client handle stays the same.
//
// Config.Mutant switches deliberate bugs on for the mutation tests; it
// takes effect only in builds with the sluicemutants tag (core/mutation).
// How the core works and why it is safe, with a page view and a drain
// walked through, is in HOW_IT_WORKS.md beside this package.
package core

// Package daemon is sluice's runtime: it runs one node of the cluster.
//
// A Node owns the lock core (package core) and the election (package
// election) and drives both from one goroutine, Run. It applies their Ready
// in order: writes go to the Store, and the messages and client events of
// a Ready wait, in a FIFO, until those writes are durable; a Ready without
// writes waits behind earlier ones, so nothing ever leaves the node before
// what it rests on is on disk. The loop never waits for the disk or the
// network: Store.Submit and Transport.Send return at once, and the durable
// signal of the oldest Ready is one more case of the loop's select. While
// one write is on its way, later Readies queue up behind it and the store
// merges them into one transaction and one fsync (group commit).
// Messages a node sends itself (it is one of the leaders) are stepped in
// the same turn, round after round, at most driveRoundsPerTurn rounds and
// none once the node is told to stop: the rest wait for the next turn, so
// a chain of them never keeps the loop from its peers, calls or a stop.
//
// Time: the core counts ticks (10 ms by default). The loop catches its tick
// count up with the wall clock, so a paused node's ticks do not run slower
// than time: a master's lease must never outlast the replicas' count of it.
// It does so after it takes each message or call, before stepping it, also
// within one turn's batch: what arrived while the process was stopped is
// stepped on a clock read after the stop, so a replica never counts a
// ticket's lifetime from before the ticket was sent.
// A node with no request of its own (core.Node.Quiet) wakes ten ticks
// apart and runs the ticks due at once: its hellos and a leader's expiries
// of others' tickets run up to 100 ms late, which only keeps those tickets
// a little longer; any request of its own makes it wake every tick.
//
// A node is master of its own clients' requests: it runs the bakery's
// phases against the view's leaders itself, whether it is a leader or not:
// no forwarding to a leader, the request reaches the leaders straight from
// the node the client called, and when a
// leader is lost the core restarts the request under the new view while the
// client keeps its lease id. Requests that arrive before a view is known
// wait in the core until their obtain timeout.
//
// Handoff: when this node, as a leader of the previous view, is asked for
// its table, the core fences durably and hands the sending over
// (core.Ready.Snapshots); once the fence is on disk a goroutine streams the
// table from one consistent read of the store (Store.Snapshot) to the new
// leader, so the loop never waits for that read.
//
// A failed write stops the node from serving (status NO_LOCK with the
// reason) rather than let it grant from a table it cannot keep.
//
// The edge: every lock request is checked once, by Request.Validate (in
// Node.Acquire), against what users may ask for; the core only keeps its
// own bounds. Turning a request into ticks (with the default quiet period)
// is the runtime's too; a grant's end is core.Event.ExpiryFrom.
// Failures are answered with the code and status of the table in
// core/codes; the runtime's own sentinels are filed there (a stopped node,
// a failed or stale store are not_ready).
//
// The local API (NewAPI) is HTTP/JSON; Agent puts a node, its p2p.Host and
// its store.Store together and serves the API on a Unix socket or a
// loopback TCP address with a bearer token. The Unix socket also speaks
// the compact protocol of semaphore/api, versions 1 and 2, for acquire,
// release and renew (compact.go): each connection is routed by its first
// bytes.
//
// Who may do what (access.go): each connection's caller is named once, by
// the kernel (SO_PEERCRED on the socket) or by its bearer token (TCP), and
// given roles on name prefixes (Access); both protocols check them, the
// Node's calls through WithCaller (a lease is its owner's or an
// operator's), the operators' endpoints in the API. A refusal is
// codes.ErrForbidden, counted and logged; operators' actions and write
// locks are audited with the caller (audit.go), and listed from every
// agent over the mesh's query protocol.
package daemon

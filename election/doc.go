// Package election is the pure election state machine: ids, priorities,
// quorum gating, views, epochs. It does no I/O; the agent feeds it messages
// and timer ticks and sends what it returns.
//
// Not built yet (issue 3).
package election

// Package election elects the three leaders of a sluice cluster, as a pure,
// deterministic state machine in the shape of package core: inputs are Step,
// Tick and nothing else; outputs come in a Ready (Persist durably first,
// then send Messages, then hand View to the lock core); then Advance. It
// starts no goroutine, does no I/O, reads no clock and draws no randomness
// (the random part of an ID is drawn by the caller, once per start).
//
// Rules:
//   - Every node has an ID computed once per start: priority | random |
//     address | pid | name. Smaller IDs win. Priority is 1..14 or Off.
//     Sitting leaders compete with priority 0, so leadership is sticky: when
//     one leader is lost, the other two stay and one node joins.
//   - No election before a quorum of the cluster's nodes know each other
//     (all of them when the cluster has three nodes or fewer), and before
//     there are three candidates (all nodes when the cluster is smaller).
//   - The alive node with the smallest ID coordinates. It runs a two-phase
//     vote, as in Paxos: PREPARE(e) gathers promises from a quorum, each
//     carrying the last view the node accepted; ACCEPT(view) then proposes
//     {e, leaders, previous view}, where the previous view is the highest
//     accepted one among the promises. A node promises only epochs above
//     any it promised, accepts at most one view per epoch, and persists
//     both before it answers. A view is valid once a quorum accepted it, so
//     there is at most one valid view per epoch whatever the clocks do, and
//     every valid view names a previous view at least as recent as any
//     earlier valid view: the one whose leaders hold the lock table.
//   - A view carries the cluster's codec (its level). Hellos offer the
//     newest codec a node reads (less while held back); the coordinator
//     sets a new view's level to the lowest offer of its members, counting
//     a member not heard lately as the oldest codec, and never below the
//     previous view's. Since that previous view is the newest valid one,
//     the level of valid views never falls, and acceptors refuse a view
//     that would lower theirs. A node offering less than the level (an
//     older release) does not vote or lead, and cannot be added.
//   - A node is ready (LOCK_READY) when it knows a valid view and hears from
//     a quorum of its leaders; otherwise Status says why not (NO_LOCK).
//   - Voters greet every node they know of; a node that is not a voter
//     greets the voters only (everyone it knows before it knows them), and
//     less often (VoterHelloTicks), so its hellos do not grow with the
//     fleet and a voter's load from the fleet is a third of theirs. Nodes
//     that are not members and stay silent for ForgetTicks are forgotten.
package election

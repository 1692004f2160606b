// Package sim is a deterministic simulator of a whole sluice cluster: five
// lock cores (three of them leaders) on an in-memory network, each with an
// in-memory "disk" that holds what its Readys' Persist returned, once
// committed. As the agent's store, the disk commits batches in order,
// while the node goes on; a message leaves once the earlier writes of its
// scope are durable (core.Write.Scope), so other names' answers overtake
// a write on its way (the agent's flush, handle and sendHeld here).
//
// One seeded PRNG drives everything: delivery order and delay, loss,
// duplication, partitions and healing, crashes (also in the middle of
// handling a Ready: with only some Messages sent, or with writes on their
// way to disk after other names' answers left) and restarts from the
// disk, and clients that acquire, hold, renew, release, abandon and
// time out. After every step Run checks the safety invariants; at the end it
// stops the faults, checks that every request resolves within a bound, that
// an exclusive probe of every name is granted and, with the semaphore's
// modes, that a reader's try on every quiet name is granted (readers come
// back after drains), and checks the history the clients observed with
// porcupine. The same seed gives
// the same run, so a failure prints its seed and replays.
//
// With Options.Nested the names nest like a site's URLs, every acquire
// names the levels above its name as its parents, and a check after every
// step holds the holders of names that nest to the modes' table (nested.go).
//
// RunFleet (fleet.go) runs the election alone, without faults, for a fleet
// of up to thousands of agents, and measures what an agent that is not a
// voter costs while idle and what losing a leader costs; only the
// election's messages count, not libp2p's traffic, connections or memory
// (integration/TESTING.md, "A fleet's idle cost").
package sim

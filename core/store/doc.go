// Package store keeps a node's durable state in Badger v4: the lock table of
// core.Durable, the election's record (ElectionRecord, election.Persisted as
// the store keeps it) and the node's incarnation.
//
// Contract:
//   - Open loads everything in one transaction, bumps the stored incarnation
//     with a synced write and returns the new one, so request ids of this
//     start never repeat those of an earlier one (wire.RequestID).
//   - The same transaction checks the node's identity: a store records the
//     first node id it is opened with and refuses any other
//     (ErrOtherIdentity). An empty store is
//     initialised only when Config.Fresh says the identity never served;
//     otherwise the node lost its state and Open refuses (ErrLost),
//     writing nothing: a node must never vote again without the promises
//     it made.
//   - Submit queues a Batch and never blocks. A single writer goroutine takes
//     the oldest queued batch plus every batch queued behind it (up to
//     Config.MaxBatch writes), applies them in order to one Badger
//     transaction, commits it and syncs it: one sync for the whole group
//     (group commit). On Linux that sync is the writer's fdatasync of
//     Badger's active memtable log, the only file a commit writes (walSync:
//     Badger's own synced writes also sync its value log, which the store
//     never writes to, at every commit); elsewhere it is Badger's
//     SyncWrites. Each batch's channel then receives nil, in Submit
//     order. A batch too large for one Badger transaction (ErrTxnTooBig) is
//     split at batch boundaries first, and only a single oversized batch is
//     split between its writes; a crash can then leave a prefix of that
//     batch's writes durable, which is a state core.Durable.Apply passes
//     through anyway.
//   - Badger runs no compactor of its own (each polls its levels 20 times
//     a second, which is most of an idle agent's store cost): the writer
//     counts its writes, and every few thousand a second goroutine looks
//     at the levels and, when one is over its target, compacts the tree
//     into one level (the lock table is small). Level-0 tables come only
//     from memtables filled by writes, so none piles up unseen.
//   - Applying a batch has exactly the meaning of core.Durable.Apply on the
//     same writes in the same order; the writes of one transaction read
//     their predecessors' effects (Badger transactions read their own
//     writes).
//   - A failed commit (a full disk, an I/O error, corrupt data met while
//     applying) is sticky: that batch and every later one fail with an error
//     wrapping ErrFailed, because what is on disk is then unknown and the
//     node must stop serving.
//     Badger v4.9.6 writes its log through a memory map of a sparse file,
//     so a full disk usually kills the process with SIGBUS inside Badger
//     instead of failing the commit; a crash is fail-stop, and what was
//     acknowledged stays durable.
//   - A store another process has open (another agent on the same data
//     directory) is refused with ErrInUse, before anything is read or
//     written.
//   - The store's layout has a format (Format; a store without a record is
//     format 1). Open refuses a newer format (ErrNewerFormat) before it
//     reads or writes anything, and migrates an older one to Format in the
//     transaction that bumps the incarnation, so a crash leaves either
//     format whole.
//   - Decoding is strict: a key or value that does not parse exactly (wrong
//     prefix, unknown version, truncated or trailing bytes) is an error
//     wrapping ErrCorrupt, never a panic.
//
// Key layout. Every key starts with one byte saying what it holds:
//
//	"n" name 0x00 0x01 "h"                 high-water mark of name
//	"n" name 0x00 0x01 "t" node(8) seq(8)  ticket of request {node, seq} on name,
//	                                       or its tombstone (state released)
//	"l" epoch(8)                           led view of that epoch (core.Durable.Led)
//	"m:fence"  "m:complete"                core.Durable.Fence and Complete
//	"m:inc"                                the incarnation of the last Open
//	"m:age"                                transactions that changed the store
//	"m:identity"                           the node id the store belongs to
//	"m:election"                           ElectionRecord
//
// Numbers in keys are big-endian so that key order is numeric order. Names
// are arbitrary bytes, so each 0x00 of a name is stored as 0x00 0xFF and the
// name ends with 0x00 0x01: the key is unambiguous and keys sort in name
// order (then the high-water mark, then the tickets in wire.RequestID order),
// which is the order Snapshot streams without sorting in memory.
//
// Values are a version byte (1; 2 for the election) followed by
// encoding/binary varints; a list is a uvarint count, then its items:
//
//	high water, fence, complete,
//	inc, identity                      uvarint
//	ticket                             uvarint ticket, byte mode, byte state,
//	                                   byte flags (bit 0: active), varint lifetime;
//	                                   a tombstone is ticket 0, mode 0, state
//	                                   released, flags 0 and its lifetime
//	view                               uvarint epoch, list of uvarint leaders,
//	                                   uvarint prev epoch, list of uvarint prev leaders
//	election (2)                       uvarint cluster, list of uvarint bootstrap members,
//	                                   uvarint promised, view+members accepted,
//	                                   view+members valid, list of lives
//	view+members                       view, list of uvarint members,
//	                                   list of uvarint prev members
//	life                               uvarint node, uvarint incarnation, uvarint nonce;
//	                                   in strictly increasing node order
//
// Version 1 of the election (uvarint promised, view accepted, view valid),
// written before membership changes existed, still loads: with no
// cluster, bootstrap, members or lives.
//
// A name must fit a Badger key (65000 bytes escaped; the wire caps names at
// 1 KiB), or its write fails. A ticket's request id lives only in its key.
// Empty lists (and lives) load as nil. A led view's epoch is stored in both
// key and value and must agree.
package store

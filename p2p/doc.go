// Package p2p is the only package importing libp2p: it forms the mesh and
// carries the core and election messages between daemons.
//
// Contract:
//
//   - A Host is a libp2p host on TCP with Noise and yamux only (no QUIC, relay,
//     NAT traversal or hole punching). A pre-shared key makes it a private
//     network; an allow-list gates every connection at the secured stage.
//   - Lock traffic travels on a lock protocol: one long-lived outbound
//     stream per peer, fed by a bounded queue. Send never blocks; a frame that
//     cannot be queued or written is dropped and counted, because the core
//     retransmits. Frames are a uvarint length and a wire.EncodeVersion body,
//     capped at Config.MaxFrame; a malformed or oversized frame resets the
//     stream and is counted, never panics.
//   - The stream is opened in the newest lock protocol both ends speak
//     (LockProtocol, codec 4; LockProtocolCodec3, the previous release's),
//     and frames to the peer are written in its codec: until a stream is
//     open, in codec 3, which every peer reads. A whole frame of a codec,
//     kind or must-understand field this build does not read is refused
//     alone (Stats.Refused) and logged with both releases; the stream goes
//     on.
//   - Every message delivered on Inbox carries, in From, the node id of the
//     authenticated peer that sent it, whatever the peer wrote there.
//   - Membership rides on gossipsub (topic MembersTopic), off the lock path:
//     announcements carry peer id, name, addresses, release and codec
//     (identify carries the release too). A host announces itself at
//     start and then at growing, jittered gaps up to announceMax, so a
//     fleet's announcements stay few.
//   - The mesh is bounded: a host keeps connected (redialed with jittered
//     exponential backoff until Close) only its configured peers, the
//     nodes the runtime names (Keep: the voters) and a few gossip peers,
//     its fingers on the ring of node ids; any other member is dialed
//     when a frame or a query goes to it, and a connection this host
//     dialed is closed once it is neither kept nor used. A peer's queue is
//     made at its first frame and its writer runs while frames come. A
//     starting host reads the members one kept peer knows
//     (RosterProtocol), since announcements are rare once a fleet runs.
//   - A member that is neither configured nor kept, and of which nothing
//     was heard for Config.ForgetAfter (no announcement, inbound stream
//     or connection), is forgotten: a web tier's replaced machines leave
//     the ring, the redials and the rosters. Rosters say how long their
//     host went without word of each member, so hearsay never makes a
//     gone machine look alive again.
//   - Close stops every goroutine the Host started and closes libp2p.
//     Inbox and Joined are never closed.
package p2p

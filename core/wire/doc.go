// Package wire is the message vocabulary shared by the lock core, the
// election and the transport, and its versioned binary codec.
//
// Contract:
//   - Message is one flat struct for every kind, in the style of raftpb.Message;
//     fields a kind does not use stay zero and cost one byte on the wire.
//   - Decode never panics and never returns a Message that breaks the caps
//     (MaxFrameSize, MaxNameLen, MaxEntries); every rejection wraps ErrMalformed
//     or one of its siblings so callers can count it with errors.Is.
//   - The package imports nothing of ours, so every other package may use it.
package wire

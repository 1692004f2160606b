// Package wire is the message vocabulary shared by the lock core, the
// election and the transport, and its versioned binary codec.
//
// Contract:
//   - Message is one flat struct for every kind, in the style of raftpb.Message;
//     fields a kind does not use stay zero and cost one byte on the wire.
//   - Decode never panics and never returns a Message that breaks the caps
//     (MaxFrameSize, MaxNameLen, MaxEntries); every rejection wraps ErrMalformed
//     or one of its siblings so callers can count it with errors.Is.
//   - Codecs MinVersion (the previous release's) to Version are read and
//     written: a transport writes to each peer in the newest codec both
//     read. A codec 4 reader skips a field it does not know unless its
//     writer marked it must be understood (ErrMustUnderstand); an unknown
//     kind is always refused (ErrKind). So a new field that older agents
//     may skip is appended to fields and sent at once; one they must not
//     skip is marked critical; a new kind or critical field is sent only to
//     peers whose codec has it. testdata/codec3.txt keeps frames of the
//     older layout, which must decode and re-encode byte for byte.
//   - The package imports nothing of ours, so every other package may use it.
package wire

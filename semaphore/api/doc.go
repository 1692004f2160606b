// Package api holds the shapes of the agent's local API: the
// JSON bodies and answers, and where the API listens by default. The agent
// (semaphore/daemon) serves these shapes; clients (semaphore/client, the
// CLI) read them, without pulling in the agent's mesh, store or lock core:
// it imports nothing of ours. The error codes, with their sentinels and
// HTTP statuses, are the table in core/codes.
//
// Every key is snake_case. Node ids are 64-bit numbers derived from peer
// ids: JSON carries them as decimal strings, so that clients whose numbers
// are doubles (JavaScript) keep every digit; lease and request ids are
// strings too ("node.incarnation.counter"). Tickets, fencing tokens,
// epochs and counters stay numbers: they count up from 1 one at a time,
// so they stay far below 2^53, and a holder compares tokens as numbers
// (as strings, "10" would sort before "9").
//
// The per-request calls (acquire, release, renew) also have a compact,
// binary form on the agent's Unix socket (compact.go), in two versions:
// version 2 adds a release the agent does not answer, so that a page
// view costs one round trip. HTTP/JSON (openapi.json) is unchanged.
package api

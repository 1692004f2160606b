// Package api holds the shapes of the agent's local API (DESIGN.md §9): the
// JSON bodies and answers, and where the API listens by default. Every key
// is snake_case; node ids are strings. The error codes, with their
// sentinels and HTTP statuses, are the table in core/codes. The agent
// (semaphore/daemon) serves these shapes; clients (semaphore/client, the
// CLI) read them, without pulling in the agent's mesh, store or lock core.
// It imports nothing of ours.
package api

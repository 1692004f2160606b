// Package api holds the shapes of the agent's local API (DESIGN.md §9): the
// JSON bodies and answers, the error codes beyond the core's, and where
// the API listens by default. The agent (semaphore/daemon) serves them;
// clients (semaphore/client, the CLI) read them, without pulling in the
// agent's mesh and store.
package api

// Package semaphore is sluice's reader/writer semaphore: the four modes
// (Mode, ParseMode, the default quiet period) as an admission
// policy (Admit) plugged into the lock core, and the errors a client may
// see. Turning requests and grants into ticks and back is the runtime's
// (semaphore/daemon); validating requests is the agent's edge.
//
// Contract: Admit is a pure function of the candidate and the other tickets
// of its name, in bakery order; the core has already waited for every
// request still choosing a number that could come before the candidate.
//
// READ_ONLY, READ_WRITE_PRIORITY and reader limits follow from ticket order
// alone. The soft writers (READ_WRITE, READ_WRITE_GENTLE) must be seen
// before they go in: they ask the core to activate them (Decision.Activate)
// and are granted only if the policy still agrees on reports made after
// that.
package semaphore

// Package semaphore is sluice's reader/writer semaphore: the modes of
// DESIGN.md §6 as an admission policy (Admit) plugged into the lock core,
// the Lease a client holds, and the errors it may see.
//
// Contract: Admit is a pure function of the candidate and the other tickets
// of its name, in bakery order; the core has already waited for every
// request still choosing a number that could come before the candidate.
//
// Built today: READ_ONLY and READ_WRITE_PRIORITY, which follow from ticket
// order alone, and the core's exclusive mode. READ_WRITE, READ_WRITE_GENTLE
// and reader limits need the core to know which tickets are active, not
// only their order; until it does, ParseMode and Admit refuse them with
// ErrUnsupported rather than grant them with other semantics.
package semaphore

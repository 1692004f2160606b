// Package semaphore implements the four semaphore modes (READ_ONLY,
// READ_WRITE_PRIORITY, READ_WRITE, READ_WRITE_GENTLE) as an admission
// policy on top of core.
//
// Not built yet (issue 4).
package semaphore

//go:build race

package semaphore_test

// raceDetector: the tests run under -race. The policy's exhaustive checks
// run on one goroutine, so the detector has nothing to find there and
// only slows them: their deepest tables are left to the plain test run.
const raceDetector = true

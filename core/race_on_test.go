//go:build race

package core_test

// raceDetector: the tests run under -race. The schedule explorer runs on
// one goroutine, so the detector has nothing to find there and only slows
// it: its long runs are left to the plain test run.
const raceDetector = true

//go:build !race

package semaphore_test

// raceDetector: the tests run under -race (see race_on_test.go).
const raceDetector = false

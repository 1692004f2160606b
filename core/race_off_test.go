//go:build !race

package core_test

// raceDetector: the tests run under -race (see race_on_test.go).
const raceDetector = false

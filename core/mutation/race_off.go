//go:build !race

package mutation

// raceBuild: the tests run under the race detector.
const raceBuild = false

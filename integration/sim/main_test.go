package sim

import (
	"os"
	"runtime/debug"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A run's heap is small and short-lived: at the default GOGC the
	// collector runs so often that it takes more than half the time (300
	// hostile seeds: 25.7 s at 100, 9.0 s at 800). An explicit GOGC wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(800)
	}
	goleak.VerifyTestMain(m)
}

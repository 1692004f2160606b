package sim

import (
	"fmt"
	"os"
	"runtime/debug"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/core/mutation"
)

func TestMain(m *testing.M) {
	// A run's heap is small and short-lived: at the default GOGC the
	// collector runs so often that it takes more than half the time (300
	// hostile seeds: 25.7 s at 100, 9.0 s at 800). An explicit GOGC wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(800)
	}
	// The tests that need the mutants run again in a build that has them
	// (core/mutation); then no goroutine may be left.
	code := mutation.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

package core_test

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/core/mutation"
)

// TestMain runs the tests that need the mutants again in a build that has
// them (core/mutation).
func TestMain(m *testing.M) { os.Exit(mutation.Main(m)) }

package daemon_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every agent a test starts is stopped by it; no goroutine may outlive that.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

//go:build !sluicemutants

package cli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/core"
)

// addBrokenFlag adds nothing: only a build with the sluicemutants tag
// has --broken (core/mutation).
func addBrokenFlag(*cobra.Command, *string) {}

func brokenBuild(string, *slog.Logger) (core.Mutant, error) { return 0, nil }

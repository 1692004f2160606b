//go:build sluicemutants

package cli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/core"
)

// brokenBuilds are the deliberately unsafe agents that the integration
// tests start with the hidden --broken flag, to prove that their checks
// catch a lock service that grants twice. Only a build with the
// sluicemutants tag has them (core/mutation).
var brokenBuilds = map[string]core.Mutant{
	"":              0,
	"quorum-of-one": core.MutantQuorumOfOne, // every phase completes with one leader's ack
	"not-durable":   core.MutantNotDurable,  // leaders acknowledge tickets they never persist
}

func addBrokenFlag(cmd *cobra.Command, to *string) {
	cmd.Flags().StringVar(to, "broken", "", "")
	_ = cmd.Flags().MarkHidden("broken")
}

// brokenBuild is the mutant --broken names.
func brokenBuild(name string, log *slog.Logger) (core.Mutant, error) {
	mutant, ok := brokenBuilds[name]
	if !ok {
		return 0, usageErrorf("agent: --broken: unknown %q", name)
	}
	if mutant != 0 {
		log.Error("THIS AGENT IS BROKEN ON PURPOSE: it may grant a lock twice; only tests start it so", "broken", name)
	}
	return mutant, nil
}

// Command sluice is the sluice binary: the agent and its command-line tools.
package main

import (
	"os"

	"github.com/sluicehq/sluice/cmd/internal/cli"
)

func main() { os.Exit(cli.Execute()) }

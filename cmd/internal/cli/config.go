package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// envName is the environment variable of a flag: SLUICE_ and the flag's
// name in capitals, dashes as underscores (--cluster-size: SLUICE_CLUSTER_SIZE).
func envName(flag string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applySettings fills the flags the command line did not set: from the
// environment first, then from the YAML file (keys are the flag names).
// Flags win over the environment, the environment over the file.
func applySettings(cmd *cobra.Command, file string) error {
	fromFile := map[string]any{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return usageErrorf("--config: %v", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&fromFile); err != nil && !errors.Is(err, io.EOF) {
			return usageErrorf("--config %s: %v", file, err)
		}
		for key := range fromFile {
			if f := cmd.Flags().Lookup(key); f == nil || key == "config" {
				return usageErrorf("--config %s: unknown setting %q", file, key)
			}
		}
	}
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		value, from, ok := "", "", false
		if v := os.Getenv(envName(f.Name)); v != "" { // empty counts as unset
			value, from, ok = v, envName(f.Name), true
		} else if v, set := fromFile[f.Name]; set {
			value, from, ok = yamlValue(v), "--config "+file, true
		}
		if !ok {
			return
		}
		if e := f.Value.Set(value); e != nil {
			err = usageErrorf("%s: %s: %v", from, f.Name, e)
		}
	})
	return err
}

// yamlValue turns a YAML value into a flag's text: lists become
// comma-separated, like --peers a,b.
func yamlValue(v any) string {
	if list, ok := v.([]any); ok {
		parts := make([]string, len(list))
		for i, x := range list {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

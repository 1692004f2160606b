package integration

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// allowedImports is the direction of imports between the project's
// packages (core/HOW_IT_WORKS.md, "Architecture"): what each package may import of ours.
// A package not listed may import nothing of ours.
var allowedImports = map[string][]string{
	"cmd/sluice":                  {"cmd/internal/cli"},
	"cmd/sluice-example-frontend": {"semaphore/client"},
	"cmd/internal/cli": {"semaphore/daemon", "semaphore/client", "semaphore/api", "semaphore", "p2p",
		"election", "core"},
	"semaphore/daemon": {"semaphore/api", "semaphore", "p2p", "election", "core/store", "core", "core/codes",
		"core/wire", "semaphore/internal/bootclock"},
	"semaphore/client": {"semaphore/api", "semaphore", "core/codes", "semaphore/internal/bootclock"},
	"semaphore":        {"core", "core/codes", "core/wire"},
	"core/store":       {"core", "core/wire"},
	"core":             {"core/codes", "core/wire"},
	"election":         {"core/wire"},
	"p2p":              {"core/wire"},
	"core/codes":       {"core/wire"},
	"integration/sim":  {"core", "core/codes", "core/wire", "election", "semaphore"},
	// The benchmark harness, a module of its own: a client like any other.
	"integration/bench": {"semaphore/client", "semaphore"},
}

const module = "github.com/sluicehq/sluice/"

// Every package imports only what the architecture allows (non-test files;
// tests may reach further, to check from outside).
func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		seen++
		for _, spec := range f.Imports {
			imp, _ := strconv.Unquote(spec.Path.Value)
			ours, ok := strings.CutPrefix(imp, module)
			if ok && !slices.Contains(allowedImports[pkg], ours) {
				t.Errorf("%s imports %s, which the architecture does not allow", path, ours)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("read only %d files: the walk missed the tree", seen)
	}
}

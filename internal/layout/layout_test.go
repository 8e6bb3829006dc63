package layout

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/infergate/infergate/"

// above lists, for each top-level folder, the folders it may not import: those above it.
var above = map[string][]string{
	"lib":      {"core", "engines", "store", "upstream", "models", "stage", "surface", "runtime", "bindings", "conformance", "examples", "tools"},
	"core":     {"engines", "store", "upstream", "models", "stage", "surface", "runtime", "bindings", "conformance", "examples", "tools"},
	"engines":  {"store", "upstream", "models", "stage", "surface", "runtime", "bindings", "conformance", "examples", "tools"},
	"store":    {"upstream", "models", "stage", "surface", "runtime", "bindings", "conformance", "examples", "tools"},
	"upstream": {"models", "stage", "surface", "runtime", "bindings", "conformance", "examples", "tools"},
	"models":   {"stage", "surface", "runtime", "bindings", "conformance", "examples", "tools"},
	"stage":    {"surface", "runtime", "bindings", "conformance", "examples", "tools"},
	"surface":  {"runtime", "bindings", "conformance", "examples", "tools"},
	"gen":      {"core", "store", "upstream", "models", "stage", "surface", "runtime", "bindings", "conformance", "examples", "tools"},
	"internal": {"store", "upstream", "models", "stage", "surface", "runtime", "bindings", "conformance", "examples", "tools"},
}

// pure lists what lib/ may not import even from the standard library or core/: the network and
// the pipeline belong to the layers above.
var pure = []string{"net/http", module + "core/pipeline"}

type pkg struct {
	ImportPath string
	Imports    []string
}

// packages lists the module's packages with their non-test imports: what a binary links.
func packages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// folder is a package's top-level folder in the module ("" outside it).
func folder(path string) string {
	rest, ok := strings.CutPrefix(path, module)
	if !ok {
		return ""
	}
	top, _, _ := strings.Cut(rest, "/")
	return top
}

// TestImportsGoDown: no package imports a folder above its own, and lib/ imports neither
// net/http nor the pipeline.
func TestImportsGoDown(t *testing.T) {
	if testing.Short() {
		t.Skip("lists every package of the module (go list): not in -short")
	}
	pkgs := packages(t)
	if len(pkgs) < 50 {
		t.Fatalf("go list found %d packages; the module has more", len(pkgs))
	}
	for _, p := range pkgs {
		from := folder(p.ImportPath)
		for _, imp := range p.Imports {
			// Generated typed-model code serves its models through engines (protoc-gen-infergate).
			if from == "gen" && strings.HasSuffix(p.ImportPath, "infergate") && strings.HasPrefix(imp, module+"engines") {
				continue
			}
			for _, banned := range above[from] {
				if folder(imp) == banned {
					t.Errorf("%s imports %s: %s/ is above %s/ (docs/architecture.md: where a package goes)", p.ImportPath, imp, banned, from)
				}
			}
			if from == "lib" {
				for _, banned := range pure {
					if imp == banned {
						t.Errorf("%s imports %s: lib/ is pure (docs/architecture.md)", p.ImportPath, imp)
					}
				}
			}
		}
	}
	for top := range above {
		found := false
		for _, p := range pkgs {
			found = found || folder(p.ImportPath) == top
		}
		if !found {
			t.Errorf("no package under %s/: the rule names a folder the layout no longer has", top)
		}
	}
}

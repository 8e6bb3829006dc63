package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPythonBinding builds the shared library and runs the Python binding's unittest suite
// against it (python/tests): a Python host loading the library, Python models, real sockets.
func TestPythonBinding(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a c-shared library and runs Python: slow")
	}
	t.Parallel()
	python, lib, root := buildLibrary(t)
	cmd := exec.Command(python, "-m", "unittest", "discover", "-s", "python/tests", "-v")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "INFERGATE_LIB="+lib, "PYTHONPATH="+filepath.Join(root, "python"))
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("python tests failed: %v", err)
	}
}

// buildLibrary builds libinfergate.so into a temporary directory; it skips tb without python3,
// go or cgo. It returns python3's path, the library's and the repository root.
func buildLibrary(tb testing.TB) (python, lib, root string) {
	tb.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		tb.Skip("python3 is not installed")
	}
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			tb.Skip("go is not on PATH")
		}
	}
	if out, err := exec.Command(goBin, "env", "CGO_ENABLED").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		tb.Skip("cgo is disabled: the shared library needs it")
	}
	lib = filepath.Join(tb.TempDir(), "libinfergate.so")
	build := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", lib, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("building the shared library: %v\n%s", err, out)
	}
	if root, err = filepath.Abs("../.."); err != nil {
		tb.Fatal(err)
	}
	return python, lib, root
}

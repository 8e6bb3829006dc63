package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
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

// TestPythonModelsOverGRPC calls Python models with the repo's Go gRPC client (grpc-go and the
// generated KServe stubs), so that the gRPC surface is tested wherever Python runs, with or
// without grpcio: a tensor model's metadata and inference, a Python error as its gRPC status, and
// a Python LLM through the KServe bridge, whole and streamed.
func TestPythonModelsOverGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a c-shared library and runs Python: slow")
	}
	t.Parallel()
	host := startPythonHost(t)
	conn, err := grpc.NewClient(host.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := inference.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	md, err := c.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "py_identity"})
	require.NoError(t, err)
	assert.Equal(t, "INPUT0", md.GetInputs()[0].GetName())
	assert.Equal(t, "FP32", md.GetOutputs()[0].GetDatatype())

	raw := make([]byte, 12)
	for i, f := range []float32{1.5, -2, 3.25} {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
	}
	req := func(model string) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: model, Id: "go-client",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{3}}},
			RawInputContents: [][]byte{raw}}
	}
	res, err := c.ModelInfer(ctx, req("py_identity"))
	require.NoError(t, err)
	assert.Equal(t, "go-client", res.GetId())
	assert.Equal(t, []int64{3}, res.GetOutputs()[0].GetShape())
	assert.Equal(t, raw, res.GetRawOutputContents()[0], "the Python function's answer, byte for byte")

	_, err = c.ModelInfer(ctx, req("py_raises"))
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "bad request for this model")

	text := func(s string) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: "py_words",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1},
				Contents: &inference.InferTensorContents{BytesContents: [][]byte{[]byte(s)}}}}}
	}
	res, err = c.ModelInfer(ctx, text("hello from go"))
	require.NoError(t, err)
	assert.Equal(t, "HELLO FROM GO ", textOutput(t, res))

	stream, err := c.ModelStreamInfer(ctx)
	require.NoError(t, err)
	r := text("one two three")
	r.Inputs = append(r.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "stream", Datatype: "BOOL", Shape: []int64{1},
		Contents: &inference.InferTensorContents{BoolContents: []bool{true}}})
	require.NoError(t, stream.Send(r))
	require.NoError(t, stream.CloseSend())
	var got []string
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.Empty(t, m.GetErrorMessage())
		if s := textOutput(t, m.GetInferResponse()); s != "" {
			got = append(got, s)
		}
	}
	assert.Equal(t, "ONE TWO THREE ", strings.Join(got, ""))
	assert.Greater(t, len(got), 1, "streamed in pieces, as the Python generator yielded them")
}

// textOutput is the response's text_output element (raw or typed contents), or "".
func textOutput(t *testing.T, res *inference.ModelInferResponse) string {
	t.Helper()
	for i, o := range res.GetOutputs() {
		if o.GetName() != "text_output" {
			continue
		}
		if i < len(res.GetRawOutputContents()) {
			elems, err := tensor.SplitBytes(res.GetRawOutputContents()[i])
			require.NoError(t, err)
			require.Len(t, elems, 1)
			return string(elems[0])
		}
		return string(o.GetContents().GetBytesContents()[0])
	}
	return ""
}

var (
	libOnce                     sync.Once
	libPython, libPath, libRoot string
	libErr                      error
)

// buildLibrary builds libinfergate.so into a temporary directory once per test binary; it skips
// tb without python3, go or cgo. It returns python3's path, the library's and the repository root.
func buildLibrary(tb testing.TB) (python, lib, root string) {
	tb.Helper()
	libOnce.Do(func() { libPython, libPath, libRoot, libErr = build() })
	var skip skipError
	if errors.As(libErr, &skip) {
		tb.Skip(string(skip))
	}
	if libErr != nil {
		tb.Fatal(libErr)
	}
	return libPython, libPath, libRoot
}

// skipError is a reason to skip: what building the library needs is missing.
type skipError string

func (e skipError) Error() string { return string(e) }

func build() (python, lib, root string, err error) {
	python, err = exec.LookPath("python3")
	if err != nil {
		return "", "", "", skipError("python3 is not installed")
	}
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			return "", "", "", skipError("go is not on PATH")
		}
	}
	if out, err := exec.Command(goBin, "env", "CGO_ENABLED").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		return "", "", "", skipError("cgo is disabled: the shared library needs it")
	}
	dir, err := os.MkdirTemp("", "infergate-lib")
	if err != nil {
		return "", "", "", err
	}
	lib = filepath.Join(dir, "libinfergate.so")
	build := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", lib, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", "", fmt.Errorf("building the shared library: %v\n%s", err, out)
	}
	if root, err = filepath.Abs("../.."); err != nil {
		return "", "", "", err
	}
	return python, lib, root, nil
}

// TestMain removes the library the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if libPath != "" {
		_ = os.RemoveAll(filepath.Dir(libPath))
	}
	os.Exit(code)
}

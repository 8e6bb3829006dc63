package protocgen_test

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/infergate/infergate/tools/protocgen"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// The plugin's inputs are compiled by the real compiler: the test copies testdata/proto and the
// schema's tensor.proto into a temporary buf workspace and runs the repository's pinned buf
// (`go tool -modfile=tools/buf/go.mod buf build`) once, getting descriptors with source info
// exactly as `buf generate` would hand them to the plugin. Each test then builds a
// CodeGeneratorRequest for one file and runs the plugin in-process.

var update = flag.Bool("update", false, "rewrite testdata/golden from the plugin's output")

var (
	descOnce sync.Once
	descSet  *descriptorpb.FileDescriptorSet
	descErr  error
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	return root
}

// workspace writes a buf workspace holding tensor.proto and the given proto files (path -> text)
// into a temporary directory.
func workspace(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	tensor, err := os.ReadFile(filepath.Join(repoRoot(t), "schema", protocgen.OptionsFile))
	require.NoError(t, err)
	files[protocgen.OptionsFile] = tensor
	files["buf.yaml"] = []byte("version: v2\n")
	for name, data := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, data, 0o644))
	}
	return dir
}

// buf runs the pinned buf from the repository root (go tool needs the main module).
func buf(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "-modfile=tools/buf/go.mod", "buf"}, args...)...)
	cmd.Dir = repoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return append(out, stderr.Bytes()...), err
	}
	return out, nil
}

// descriptors compiles testdata/proto once per test binary.
func descriptors(t *testing.T) *descriptorpb.FileDescriptorSet {
	t.Helper()
	descOnce.Do(func() {
		files := map[string][]byte{}
		descErr = filepath.WalkDir("testdata/proto", func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			rel, _ := filepath.Rel("testdata/proto", p)
			files[filepath.ToSlash(rel)] = data
			return err
		})
		if descErr != nil {
			return
		}
		dir := workspace(t, files)
		var out []byte
		if out, descErr = buf(t, "build", dir, "--as-file-descriptor-set", "-o", "-"); descErr != nil {
			descErr = &buildError{string(out)}
			return
		}
		descSet = new(descriptorpb.FileDescriptorSet)
		descErr = proto.Unmarshal(out, descSet)
	})
	require.NoError(t, descErr)
	return descSet
}

type buildError struct{ out string }

func (e *buildError) Error() string { return "buf build: " + e.out }

// run runs the plugin on one file of testdata/proto, as buf generate with
// paths=source_relative would.
func run(t *testing.T, file string) (*pluginpb.CodeGeneratorResponse, error) {
	t.Helper()
	set := descriptors(t)
	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate: []string{file},
		Parameter:      proto.String("paths=source_relative"),
		ProtoFile:      set.File, // buf emits them in dependency order, as the request needs
	}
	p, err := protogen.Options{}.New(req)
	require.NoError(t, err)
	if err := protocgen.Generate(p); err != nil {
		return nil, err
	}
	return p.Response(), nil
}

func TestGolden(t *testing.T) {
	for _, file := range []string{"golden/v1/scorer.proto", "golden/v1/tensortest.proto"} {
		t.Run(file, func(t *testing.T) {
			resp, err := run(t, file)
			require.NoError(t, err)
			require.Empty(t, resp.GetError())
			require.Len(t, resp.File, 1)
			got := []byte(resp.File[0].GetContent())
			golden := filepath.Join("testdata", "golden", strings.TrimSuffix(filepath.Base(file), ".proto")+".infergate.go.golden")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, got, 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run go test ./tools/protocgen -run TestGolden -update to create it")
			assert.Equal(t, string(want), string(got), "output differs from %s; if intended, rerun with -update", golden)
			assert.Equal(t, "golden/v1/goldenv1infergate/"+strings.TrimSuffix(filepath.Base(file), ".proto")+".infergate.go", resp.File[0].GetName())

			// Deterministic: a second run gives the same bytes.
			again, err := run(t, file)
			require.NoError(t, err)
			assert.Equal(t, string(got), again.File[0].GetContent())
		})
	}
}

// Files that do not use the options produce nothing, so the plugin can run on every file.
func TestUnannotatedFileGeneratesNothing(t *testing.T) {
	resp, err := run(t, protocgen.OptionsFile)
	require.NoError(t, err)
	assert.Empty(t, resp.File)
}

// badAnnotations are the files of testdata/proto/bad and the exact error each must give: the
// file, line and column, the element, and the problem.
var badAnnotations = map[string]string{
	"unknown_datatype.proto": `bad/unknown_datatype.proto:15:3: field unknown_datatype.Req.x: unknown datatype "FP17" (KServe datatypes: BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES, BF16)`,
	"type_mismatch.proto":    `bad/type_mismatch.proto:15:3: field type_mismatch.Req.x: a repeated float field cannot hold datatype INT32 (it holds FP32)`,
	"duplicate_name.proto":   `bad/duplicate_name.proto:16:3: field duplicate_name.Req.z: tensor name "IN" is already used by field x`,
	"not_repeated.proto":     `bad/not_repeated.proto:15:3: field not_repeated.Req.x: is not repeated; a tensor is a flat list of elements (use repeated float, or bytes for raw data)`,
	"raw_without_datatype.proto": `bad/raw_without_datatype.proto:15:3: field raw_without_datatype.Req.x: is bytes, which holds raw tensor data: ` +
		`set datatype (one of BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BF16)`,
	"no_shape.proto": `bad/no_shape.proto:15:3: field no_shape.Req.x: tensor "IN" has no shape (set shape, -1 for a variable dimension)`,
	"batch_dim.proto": `bad/batch_dim.proto:19:3: field batch_dim.Resp.y: tensor "y" has shape [1], but model "m" batches (max_batch_size 8): ` +
		`its shape must start with the batch dimension -1, then at least one more`,
	"unannotated.proto":   `bad/unannotated.proto:16:3: field unannotated.Req.note: has no (infergate.tensor.v1.tensor) option; every field of a model's request and response is a tensor or a tensor's shape_field`,
	"message_field.proto": `bad/message_field.proto:15:3: field message_field.Req.x: is not repeated; a tensor is a flat list of elements (use repeated message, or bytes for raw data)`,
	"two_variable_dims.proto": `bad/two_variable_dims.proto:19:3: field two_variable_dims.Resp.y: output "y" has 2 variable dimensions, ` +
		`so its shape cannot be inferred from its length: set shape_field`,
	"control_without_sequence.proto": `bad/control_without_sequence.proto:16:3: field control_without_sequence.Req.start: is a sequence control, but model "m" has no sequence option`,
	"bad_shape_field.proto":          `bad/bad_shape_field.proto:15:3: field bad_shape_field.Req.x: shape_field "x_shape" must be a repeated int64 field`,
	"optional_output.proto":          `bad/optional_output.proto:19:3: field optional_output.Resp.y: is an output; only inputs can be optional`,
	"unnamed_rpcs.proto": `bad/unnamed_rpcs.proto:11:3: rpc unnamed_rpcs.Svc.Run: service has 2 RPCs, so each needs its own (infergate.tensor.v1.method_model) option naming its model` + "\n" +
		`bad/unnamed_rpcs.proto:12:3: rpc unnamed_rpcs.Svc.Walk: service has 2 RPCs, so each needs its own (infergate.tensor.v1.method_model) option naming its model`,
	"client_streaming.proto": `bad/client_streaming.proto:11:3: rpc client_streaming.Svc.Run: is client-streaming; a model takes one request (use a unary or server-streaming RPC)`,
}

func TestBadAnnotations(t *testing.T) {
	entries, err := os.ReadDir("testdata/proto/bad")
	require.NoError(t, err)
	require.Len(t, entries, len(badAnnotations), "every bad file has an expected error, and every expected error a file")
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			want, ok := badAnnotations[e.Name()]
			require.True(t, ok, "no expected error for %s", e.Name())
			_, err := run(t, "bad/"+e.Name())
			require.Error(t, err)
			assert.Equal(t, want, err.Error())
		})
	}
}

// A bad annotation fails `buf generate` itself, with the plugin's message: the path users see.
func TestBadAnnotationFailsBufGenerate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs buf generate with the plugin built by go run")
	}
	src, err := os.ReadFile("testdata/proto/bad/type_mismatch.proto")
	require.NoError(t, err)
	dir := workspace(t, map[string][]byte{
		"bad/type_mismatch.proto": src,
		"buf.gen.yaml": []byte(`version: v2
plugins:
  - local: ["go", "run", "./tools/protocgen/cmd/protoc-gen-infergate"]
    out: gen
    opt: paths=source_relative
`),
	})
	out, err := buf(t, "generate", dir, "--template", filepath.Join(dir, "buf.gen.yaml"), "-o", dir)
	require.Error(t, err, "buf generate must fail: %s", out)
	assert.Contains(t, string(out), badAnnotations["type_mismatch.proto"])
	_, statErr := os.Stat(filepath.Join(dir, "gen"))
	assert.True(t, os.IsNotExist(statErr), "nothing is written")
}

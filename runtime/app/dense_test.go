package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/infergate/infergate/engines/cuda"
	"github.com/infergate/infergate/engines/dense"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/stretchr/testify/require"
)

// TestDenseModels: dense_models serves a safetensors network over KServe's REST infer with the
// CPU reference's answer; KIND_GPU fails the start with a message naming the model where this
// binary has no GPU engine.
func TestDenseModels(t *testing.T) {
	t.Parallel()
	net := dense.Random(21, 6, 16, 3)
	file, err := net.Encode()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "mlp.safetensors")
	require.NoError(t, os.WriteFile(path, file, 0o600))
	addr := serveYAML(t, fmt.Sprintf("dense_models:\n  mlp:\n    path: %s\n    max_batch_size: 4\n", path), io.Discard)

	body, err := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "INPUT", "datatype": "FP32", "shape": []int{2, 6},
		"data": []float32{1, 2, 3, 4, 5, 6, -1, 0, 1, 0, -1, 0.5}}}})
	require.NoError(t, err)
	res, err := http.Post("http://"+addr+"/v2/models/mlp/infer", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", raw)
	var got struct {
		Outputs []struct {
			Name  string    `json:"name"`
			Shape []int     `json:"shape"`
			Data  []float32 `json:"data"`
		} `json:"outputs"`
	}
	require.NoError(t, json.Unmarshal(raw, &got))
	want := make([]float32, 6)
	net.Forward(want, []float32{1, 2, 3, 4, 5, 6, -1, 0, 1, 0, -1, 0.5}, 2, nil)
	require.Equal(t, "OUTPUT", got.Outputs[0].Name)
	require.Equal(t, []int{2, 3}, got.Outputs[0].Shape)
	require.InDeltaSlice(t, want, got.Outputs[0].Data, 1e-6)

	res, err = http.Get("http://" + addr + "/v2/models/mlp/config")
	require.NoError(t, err)
	raw, _ = io.ReadAll(res.Body)
	res.Body.Close()
	require.Contains(t, string(raw), inference.ModelInstanceGroup_KIND_CPU.String())

	if _, err := cuda.Probe(); err == nil {
		return // a GPU build on a GPU: engines/cuda's tests place models there
	}
	cfg, err := ParseConfig("test", []byte(fmt.Sprintf("dense_models:\n  mlp:\n    path: %s\n    kind: KIND_GPU\n", path)))
	require.NoError(t, err)
	_, err = Build(cfg, RoleGateway, gateway.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.ErrorContains(t, err, "dense_models.mlp")
	require.ErrorContains(t, err, "no GPU engine")
}

// TestDenseModelsConfig: dense_models mistakes are named at parse time.
func TestDenseModelsConfig(t *testing.T) {
	_, err := ParseConfig("test", []byte("dense_models:\n  a:\n    kind: GPU\n    gpus: [1]\n"))
	require.ErrorContains(t, err, "dense_models.a.path: the safetensors file is required")
	require.ErrorContains(t, err, `dense_models.a.kind: "GPU" is not one of KIND_CPU, KIND_GPU`)
	require.ErrorContains(t, err, "dense_models.a.gpus: needs kind: KIND_GPU")
}

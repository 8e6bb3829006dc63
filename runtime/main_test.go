package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/runtime/app"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestBinaryServesAndDrainsOnSIGTERM runs the real binary: it serves `simple`, and on SIGTERM lets
// an in-flight decoupled stream finish before exiting 0.
func TestBinaryServesAndDrainsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "infergate")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	addr := freeAddr(t)
	cmd := exec.Command(bin, "-listen", addr, "-drain-timeout", "10s")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		res := new(inference.ServerReadyResponse)
		return conn.Invoke(ctx, "/inference.GRPCInferenceService/ServerReady", &inference.ServerReadyRequest{}, res) == nil && res.Ready
	}, 20*time.Second, 20*time.Millisecond)

	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/inference.GRPCInferenceService/ModelStreamInfer")
	require.NoError(t, err)
	in := []int32{7, 8, 9}
	require.NoError(t, s.SendMsg(&inference.ModelInferRequest{ModelName: "repeat_int32", Id: "sigterm",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "IN", Datatype: "INT32", Shape: []int64{3}},
			{Name: "DELAY", Datatype: "UINT32", Shape: []int64{3}},
			{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}},
		},
		RawInputContents: [][]byte{tensor.Bytes(in), tensor.Bytes([]uint32{0, 300, 300}), tensor.Bytes([]uint32{0})},
	}))
	require.NoError(t, s.CloseSend())
	first := new(inference.ModelStreamInferResponse)
	require.NoError(t, s.RecvMsg(first))

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	got := []int32{tensor.View[int32](first.InferResponse.RawOutputContents[0])[0]}
	for {
		m := new(inference.ModelStreamInferResponse)
		err := s.RecvMsg(m)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, tensor.View[int32](m.InferResponse.RawOutputContents[0])[0])
	}
	assert.Equal(t, in, got, "the stream in flight at SIGTERM completed")
	select {
	case err := <-exited:
		require.NoError(t, err, "clean exit after draining")
	case <-time.After(15 * time.Second):
		t.Fatal("process did not exit after draining")
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func TestBadConfigFailsStartup(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("upstreams:\n  - name: x\n    url: http://h\n    type: triton\n"), 0o600))
	err := run([]string{"-listen", "127.0.0.1:0", "-config", cfg})
	require.Error(t, err)
	assert.Equal(t, cfg+`: upstreams: endpoint "x": type: "triton" is not one of vllm, sglang, llamacpp, lm-studio, openai, ollama, kserve`, err.Error())

	err = run([]string{"-listen", "127.0.0.1:0", "-role", "batch-worker"})
	require.EqualError(t, err, "-role batch-worker needs batch.kafka.brokers and redis.addr, shared with the gateways")
	err = run([]string{"-listen", "127.0.0.1:0", "-role", "janitor"})
	require.EqualError(t, err, `bad -role "janitor": gateway or batch-worker`)
}

// TestImportOlla: `infergate import-olla` turns each of Olla's own config files (the converter's
// test data) into a config the gateway loads, once the variables it names are set.
func TestImportOlla(t *testing.T) {
	files, err := filepath.Glob("ollaconfig/testdata/*.yaml")
	require.NoError(t, err)
	vars := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".infergate.yaml") {
			continue
		}
		n++
		var out, msgs bytes.Buffer
		require.NoError(t, importOlla([]string{f}, &out, &msgs), f)
		assert.Contains(t, msgs.String(), "run it with: infergate -config", f)
		for _, m := range vars.FindAllStringSubmatch(out.String(), -1) {
			t.Setenv(m[1], "x")
		}
		_, err := app.ParseConfig(f, out.Bytes())
		assert.NoError(t, err, "%s converted:\n%s", f, out.String())
	}
	assert.GreaterOrEqual(t, n, 5)

	var out bytes.Buffer
	assert.ErrorContains(t, importOlla(nil, &out, io.Discard), "usage: infergate import-olla")
	bad := filepath.Join(t.TempDir(), "olla.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("discovery:\n  statik: {}\n"), 0o600))
	assert.ErrorContains(t, importOlla([]string{bad}, &out, io.Discard), "statik")
	assert.ErrorContains(t, run([]string{"-olla-config", bad}), "statik", "-olla-config converts too")
}

package embed_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/bindings/embed"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/stage/guard"
	"github.com/stretchr/testify/require"
)

func start(t *testing.T) (*embed.Gateway, string) {
	t.Helper()
	g, err := embed.New(embed.Config{LogLevel: "error"})
	require.NoError(t, err)
	addr, err := g.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Stop(context.Background()) })
	return g, "http://" + addr
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

var spec = embed.TensorSpec{Name: "neg",
	Inputs:  []embed.TensorDecl{{Name: "IN", Datatype: "INT32", Shape: []int64{-1}}},
	Outputs: []embed.TensorDecl{{Name: "OUT", Datatype: "INT32", Shape: []int64{-1}}}}

func TestTensorModel(t *testing.T) {
	t.Parallel()
	g, url := start(t)
	require.NoError(t, g.RegisterTensorModel(spec, func(_ context.Context, req *engines.Request) ([]engines.Tensor, error) {
		in := req.Input("IN")
		out := make([]byte, len(in.Data))
		for i := 0; i < len(out); i += 4 {
			v := -int32(uint32(in.Data[i]) | uint32(in.Data[i+1])<<8 | uint32(in.Data[i+2])<<16 | uint32(in.Data[i+3])<<24)
			out[i], out[i+1], out[i+2], out[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
		return []engines.Tensor{{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: in.Shape, Data: out}}, nil
	}))
	status, body := post(t, url+"/v2/models/neg/infer", `{"inputs":[{"name":"IN","datatype":"INT32","shape":[2],"data":[1,-5]}]}`)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, `"data":[-1,5]`)

	err := g.RegisterTensorModel(spec, nil)
	require.ErrorContains(t, err, "already registered")
	bad := spec
	bad.Name = "bad"
	bad.Inputs = []embed.TensorDecl{{Name: "IN", Datatype: "INT33", Shape: []int64{1}}}
	require.ErrorContains(t, g.RegisterTensorModel(bad, nil), "unknown datatype")
}

func TestTensorModelBadOutputs(t *testing.T) {
	t.Parallel()
	g, url := start(t)
	cases := map[string][]engines.Tensor{
		"dtype":    {{Name: "OUT", Datatype: inference.DataType_TYPE_FP32, Shape: []int64{1}, Data: make([]byte, 4)}},
		"size":     {{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{2}, Data: make([]byte, 4)}},
		"missing":  nil,
		"extra":    {{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{1}, Data: make([]byte, 4)}, {Name: "X"}},
		"negative": {{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{-4}, Data: nil}},
	}
	want := map[string]string{"dtype": "as FP32, declared INT32", "size": "with 4 bytes", "missing": "did not return output 'OUT'",
		"extra": "does not declare", "negative": "invalid shape"}
	for name, outs := range cases {
		s := spec
		s.Name = name
		require.NoError(t, g.RegisterTensorModel(s, func(context.Context, *engines.Request) ([]engines.Tensor, error) { return outs, nil }))
		status, body := post(t, url+"/v2/models/"+name+"/infer", `{"inputs":[{"name":"IN","datatype":"INT32","shape":[1],"data":[1]}]}`)
		require.Equal(t, 500, status, name)
		require.Contains(t, body, want[name], name)
	}
}

func TestLLMStreams(t *testing.T) {
	t.Parallel()
	g, url := start(t)
	require.NoError(t, g.RegisterLLM("words", func(_ context.Context, req embed.LLMRequest, emit func(string) error) error {
		for _, w := range []string{"a ", "b ", "c"} {
			if err := emit(w); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, g.RegisterLLM("broken", func(context.Context, embed.LLMRequest, func(string) error) error {
		return errors.New("no luck")
	}))
	require.ErrorContains(t, g.RegisterLLM("words", nil), "already registered")

	status, body := post(t, url+"/v1/completions", `{"model":"words","prompt":"x"}`)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, `"text":"a b c"`)
	status, body = post(t, url+"/v1/completions", `{"model":"broken","prompt":"x"}`)
	require.GreaterOrEqual(t, status, 500, body)
	require.Contains(t, body, "no luck")

	res, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"words","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	require.NoError(t, err)
	defer res.Body.Close()
	var got strings.Builder
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		require.NoError(t, json.Unmarshal([]byte(line), &c))
		got.WriteString(c.Choices[0].Delta.Content)
	}
	require.Equal(t, "a b c", got.String())
}

func TestHungModelAnswersAtItsDeadline(t *testing.T) {
	t.Parallel()
	g, url := start(t)
	release := make(chan struct{})
	defer close(release)
	require.NoError(t, g.RegisterTensorModel(spec, func(context.Context, *engines.Request) ([]engines.Tensor, error) {
		<-release
		return nil, nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v2/models/neg/infer",
		strings.NewReader(`{"inputs":[{"name":"IN","datatype":"INT32","shape":[1],"data":[1]}]}`))
	_, err := http.DefaultClient.Do(req)
	require.Error(t, err) // the client gave up; the gateway still answers others:
	res, err := http.Get(url + "/v2/health/ready")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 200, res.StatusCode)
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	c, err := embed.ParseConfig([]byte(`{"server_name": "x", "drain_timeout": "2s", "builtin_models": true}`))
	require.NoError(t, err)
	require.Equal(t, "x", c.ServerName)
	require.Equal(t, 2*time.Second, c.DrainTimeout)
	require.True(t, *c.App.BuiltinModels)
	c, err = embed.ParseConfig(nil)
	require.NoError(t, err)
	require.False(t, *c.App.BuiltinModels, "an embedding program serves its own models unless it asks")
	_, err = embed.ParseConfig([]byte("auth:\n  keys: [{name: a}]\n"))
	require.ErrorContains(t, err, "auth.", "the runtime's validation applies")
	_, err = embed.ParseConfig([]byte("log_level: loud\n"))
	require.ErrorContains(t, err, "log_level")
	_, err = embed.ParseConfig([]byte("nope: 1\n"))
	require.ErrorContains(t, err, "field nope not found", "unknown keys stay errors")
}

// TestWholeConfig: the runtime's whole config applies embedded: API keys guard the embedding
// program's models, and their models.<name> stages (here the response cache) run in front of them.
func TestWholeConfig(t *testing.T) {
	t.Parallel()
	const key = "sk-embedded-test-key"
	c, err := embed.ParseConfig([]byte(`
log_level: error
auth:
  keys: [{name: app, sha256: ` + guard.HashKey(key) + `, models: [echo]}]
models:
  echo: {cache: {mode: exact}}
`))
	require.NoError(t, err)
	g, err := embed.New(c)
	require.NoError(t, err)
	addr, err := g.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Stop(context.Background()) })
	var calls atomic.Int32
	require.NoError(t, g.RegisterLLM("echo", func(_ context.Context, req embed.LLMRequest, emit func(string) error) error {
		calls.Add(1)
		return emit("echo: " + req.Model)
	}))

	call := func(key string) (int, http.Header, string) {
		req, err := http.NewRequest("POST", "http://"+addr+"/v1/completions",
			strings.NewReader(`{"model":"echo","prompt":"hi","temperature":0}`))
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
	status, _, body := call("")
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, h, body := call(key)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "echo: echo")
	require.Equal(t, "miss", h.Get("X-Infergate-Cache"))
	status, h, body = call(key)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "echo: echo")
	require.Equal(t, "hit", h.Get("X-Infergate-Cache"))
	require.EqualValues(t, 1, calls.Load(), "the second answer came from the cache")
}

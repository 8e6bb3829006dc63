package granitekserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/gen/inference/inferenceconnect"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/lib/granite/granitekserve"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/kserve"
)

// textModel is a fake LLM with the text contract: it answers each prompt with a canned Granite
// 3.3 reasoning output, n times (from sampling_parameters), and records what it got.
type textModel struct {
	mu       sync.Mutex
	prompts  []string
	sampling []map[string]any
}

func (m *textModel) Config() *inference.ModelConfig {
	return &inference.ModelConfig{Name: "granite-text",
		Input: []*inference.ModelInput{
			{Name: "text_input", DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}},
			{Name: "sampling_parameters", DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}, Optional: true},
		},
		Output: []*inference.ModelOutput{
			{Name: "text_output", DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}},
			{Name: "finish_reason", DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}},
		}}
}

func (m *textModel) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in, err := tensor.SplitBytes(req.Input("text_input").Data)
	if err != nil || len(in) != 1 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("one text_input"))
	}
	sp := map[string]any{}
	if t := req.Input("sampling_parameters"); t != nil {
		el, err := tensor.SplitBytes(t.Data)
		if err != nil || len(el) != 1 || json.Unmarshal(el[0], &sp) != nil {
			return connect.NewError(connect.CodeInvalidArgument, errors.New("bad sampling_parameters"))
		}
	}
	m.mu.Lock()
	m.prompts = append(m.prompts, string(in[0]))
	m.sampling = append(m.sampling, sp)
	m.mu.Unlock()
	n := 1
	if v, ok := sp["n"].(float64); ok {
		n = int(v)
	}
	texts, reasons := make([]string, n), make([]string, n)
	for i := range texts {
		texts[i], reasons[i] = "<think>hmm</think><response>42</response>", "stop"
	}
	if n > 1 {
		reasons[n-1] = "length"
	}
	return send(&engines.Response{Outputs: []engines.Tensor{
		{Name: "text_output", Datatype: inference.DataType_TYPE_STRING, Shape: []int64{int64(n)}, Data: tensor.JoinBytes(texts)},
		{Name: "finish_reason", Datatype: inference.DataType_TYPE_STRING, Shape: []int64{int64(n)}, Data: tensor.JoinBytes(reasons)},
	}})
}

// serve runs a KServe service holding the fake model on a real socket.
func serve(t *testing.T) (*kserve.Service, *textModel, string) {
	t.Helper()
	reg := engines.NewRegistry()
	m := &textModel{}
	if _, err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	svc := kserve.NewService(reg)
	path, h := svc.Handler()
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return svc, m, srv.URL
}

func TestBackendOverSocket(t *testing.T) {
	t.Parallel()
	svc, m, url := serve(t)
	clients := map[string]granitekserve.Inferer{
		"connect":    inferenceconnect.NewGRPCInferenceServiceClient(http.DefaultClient, url),
		"in-process": svc,
	}
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			reg := granite.NewDefaultRegistry()
			b := granitekserve.New(c, "granite-text", granitekserve.Options{})
			io, err := reg.IOProcessor("granite3.3", b)
			if err != nil {
				t.Fatal(err)
			}
			res, err := io.Chat(context.Background(), &granite.ChatRequest{
				Messages: []granite.Message{{Role: "user", Content: "What is 6*7?"}}, Thinking: true,
				Params: map[string]any{"n": 2, "temperature": 0.5, "model": "ignored", "stream": true}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 2 || res[0].NextMessage.Content != "42" || res[0].NextMessage.ReasoningContent == nil ||
				*res[0].NextMessage.ReasoningContent != "hmm" || res[0].NextMessage.StopReason != "stop" || res[1].NextMessage.StopReason != "length" {
				t.Fatalf("results %+v", res)
			}
			m.mu.Lock()
			prompt, sp := m.prompts[len(m.prompts)-1], m.sampling[len(m.sampling)-1]
			m.mu.Unlock()
			if !strings.HasSuffix(prompt, "<|start_of_role|>user<|end_of_role|>What is 6*7?<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>") {
				t.Errorf("prompt %q", prompt)
			}
			if len(sp) != 2 || sp["n"] != 2.0 || sp["temperature"] != 0.5 {
				t.Errorf("sampling_parameters %v (model and stream must not be sent)", sp)
			}
		})
	}
}

func TestBackendErrors(t *testing.T) {
	t.Parallel()
	svc, _, _ := serve(t)
	_, err := granitekserve.New(svc, "nope", granitekserve.Options{}).Generate(context.Background(), granite.GenerateRequest{Prompt: "p"})
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown model: %v", err)
	}
	_, err = granitekserve.New(svc, "granite-text", granitekserve.Options{MaxAnswerBytes: 8}).Generate(context.Background(), granite.GenerateRequest{Prompt: "p"})
	if err == nil || !strings.Contains(err.Error(), "over 8 bytes") {
		t.Errorf("answer over the bound: %v", err)
	}
}

// canned answers with a fixed response, to check the decoding of what servers send.
type canned struct{ res *inference.ModelInferResponse }

func (c canned) ModelInfer(context.Context, *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return c.res, nil
}

func TestBackendDecodesAnswers(t *testing.T) {
	t.Parallel()
	bytesOut := func(name string, elems ...string) *inference.ModelInferResponse_InferOutputTensor {
		c := &inference.InferTensorContents{}
		for _, e := range elems {
			c.BytesContents = append(c.BytesContents, []byte(e))
		}
		return &inference.ModelInferResponse_InferOutputTensor{Name: name, Datatype: "BYTES", Shape: []int64{int64(len(elems))}, Contents: c}
	}
	for _, tc := range []struct {
		name string
		res  *inference.ModelInferResponse
		want string // texts joined by |, or the error's start
	}{
		{"typed", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{bytesOut("text_output", "a", "b")}}, "a|b"},
		{"raw", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "text_output", Datatype: "BYTES"}},
			RawOutputContents: [][]byte{tensor.JoinBytes([]string{"x"})}}, "x"},
		{"missing", &inference.ModelInferResponse{}, "error: no text_output"},
		{"wrong type", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "text_output", Datatype: "FP32"}}}, "error: text_output is FP32"},
		{"bad framing", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "text_output", Datatype: "BYTES"}},
			RawOutputContents: [][]byte{{0xff, 0xff, 0xff, 0x7f, 'a'}}}, "error: text_output:"},
		{"raw count", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "text_output", Datatype: "BYTES"}, {Name: "x"}},
			RawOutputContents: [][]byte{nil}}, "error: raw_output_contents"},
		{"typed too big", &inference.ModelInferResponse{Outputs: []*inference.ModelInferResponse_InferOutputTensor{bytesOut("text_output", strings.Repeat("a", 100))}}, "error: text_output is over"},
	} {
		gens, err := granitekserve.New(canned{tc.res}, "m", granitekserve.Options{MaxAnswerBytes: 64}).Generate(context.Background(), granite.GenerateRequest{Prompt: "p"})
		got := ""
		if err != nil {
			got = "error: " + err.Error()[len(`granitekserve: model "m" answered: `):]
		} else {
			var texts []string
			for _, g := range gens {
				texts = append(texts, g.Text)
			}
			got = strings.Join(texts, "|")
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

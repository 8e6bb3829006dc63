package suite

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
)

// bridgeChecks hold an LLM served as a KServe model (Dynamo's KServe frontend convention, which
// infergate's OpenAI bridge follows) to its tensor contract: text_input BYTES [1] in, text_output
// and finish_reason BYTES out, one element per choice, optional BOOL stream/streaming input.
func bridgeChecks() []Check {
	return []Check{
		{ID: "bridge.completions", Title: "an LLM model answers text_input (raw and typed) with text_output and a finish_reason per choice", Class: Infergate, Cite: citeBridge, Item: 63, Run: func(t *T) {
			m := t.llmModel()
			raw := t.mustInfer(llmRequest(m, "Say hello", false, false))
			typed := t.mustInfer(llmRequest(m, "Say hello", false, true))
			for _, resp := range []*inference.ModelInferResponse{raw, typed} {
				texts, reasons := outputStrings(t, resp, "text_output"), outputStrings(t, resp, "finish_reason")
				if len(texts) == 0 || len(texts) != len(reasons) {
					t.Fail("one text_output and one finish_reason element per choice (>= 1)", fmt.Sprintf("%d text_output, %d finish_reason", len(texts), len(reasons)))
				}
				for _, r := range reasons {
					if !slices.Contains([]string{"stop", "length", "content_filter"}, r) {
						t.Fail("finish_reason in {stop, length, content_filter}", fmt.Sprintf("%q", r))
					}
				}
			}
			t.Note("model '%s'", m.name)
		}},
		{ID: "bridge.completions-errors", Title: "an LLM model rejects a request without text_input or with an unknown input", Class: Infergate, Cite: own("each chat or completions model gets a KServe model of the same name with `text_input` BYTES [1]"), Item: 63, Run: func(t *T) {
			m := t.llmModel()
			_, err := t.infer(&inference.ModelInferRequest{ModelName: m.name})
			t.expectCode(err, "ModelInfer without text_input", codes.InvalidArgument)
			req := llmRequest(m, "hi", false, false)
			req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "conformance_unknown", Datatype: "BYTES", Shape: []int64{1}})
			req.RawInputContents = append(req.RawInputContents, frame([]byte("x")))
			_, err = t.infer(req)
			t.expectCode(err, "ModelInfer with an unknown input", codes.InvalidArgument)
		}},
		{ID: "bridge.stream", Title: "an LLM model streams deltas whose concatenation is the unary text; only the last is final", Class: Infergate, Cite: own("ModelStreamInfer with `stream=true` sends one response per upstream chunk, `triton_final_response` false until the last, which carries the finish reason"), Item: 64, Run: func(t *T) {
			m := t.llmModel()
			streamIn := llmStreamInput(m)
			if streamIn == "" {
				t.Skip("model '%s' has no BOOL stream/streaming input", m.name)
			}
			unary := strings.Join(outputStrings(t, t.mustInfer(llmRequest(m, "Count to five", false, false)), "text_output"), "")
			ctx, cancel := context.WithCancel(t.ctx)
			defer cancel()
			stream, err := t.client().ModelStreamInfer(ctx)
			t.expectOK(err, "ModelStreamInfer")
			req := llmRequest(m, "Count to five", true, false)
			req.Id = "bridge-stream"
			t.expectOK(stream.Send(req), "ModelStreamInfer send")
			t.expectOK(stream.CloseSend(), "ModelStreamInfer close send")
			var text strings.Builder
			n := 0
			for {
				r, err := stream.Recv()
				if err == io.EOF {
					break
				}
				t.expectOK(err, "ModelStreamInfer receive")
				if r.GetErrorMessage() != "" {
					t.Fail("no error_message", r.GetErrorMessage())
				}
				resp := r.GetInferResponse()
				final := resp.GetParameters()["triton_final_response"].GetBoolParam()
				var reason string
				if len(resp.GetOutputs()) > 0 {
					for _, s := range outputStrings(t, resp, "text_output") {
						text.WriteString(s)
					}
					reason = strings.Join(outputStrings(t, resp, "finish_reason"), "")
				}
				n++
				if final != (reason != "") && len(resp.GetOutputs()) > 0 {
					t.Fail("finish_reason set exactly on the response marked triton_final_response", fmt.Sprintf("response %d: final=%v finish_reason=%q", n, final, reason))
				}
				if final {
					break
				}
				if n > 10000 {
					t.Failf("more than 10000 responses without a final one")
				}
			}
			equal(t, "concatenated streamed text_output", unary, text.String())
			t.Note("%d responses", n)
		}},
	}
}

// llmModel returns a model with the LLM tensor contract, or skips.
func (t *T) llmModel() *model {
	for _, m := range t.env.models {
		if hasTensor(m.meta.GetInputs(), "text_input", "BYTES") && hasTensor(m.meta.GetOutputs(), "text_output", "BYTES") &&
			hasTensor(m.meta.GetOutputs(), "finish_reason", "BYTES") {
			return m
		}
	}
	t.Skip("no LLM model (text_input -> text_output, finish_reason) is served")
	return nil
}

func hasTensor(ts []*inference.ModelMetadataResponse_TensorMetadata, name, datatype string) bool {
	for _, x := range ts {
		if x.GetName() == name && x.GetDatatype() == datatype {
			return true
		}
	}
	return false
}

// llmStreamInput is the name of the model's BOOL streaming switch, if it has one.
func llmStreamInput(m *model) string {
	for _, name := range []string{"stream", "streaming"} {
		if hasTensor(m.meta.GetInputs(), name, "BOOL") {
			return name
		}
	}
	return ""
}

// llmRequest asks m to complete prompt, streaming or not, with raw or typed contents.
func llmRequest(m *model, prompt string, stream, typed bool) *inference.ModelInferRequest {
	shape := []int64{1}
	if m.maxBatch() > 0 {
		shape = []int64{1, 1}
	}
	req := &inference.ModelInferRequest{ModelName: m.name}
	text := &inference.ModelInferRequest_InferInputTensor{Name: "text_input", Datatype: "BYTES", Shape: shape}
	req.Inputs = append(req.Inputs, text)
	if typed {
		text.Contents = &inference.InferTensorContents{BytesContents: [][]byte{[]byte(prompt)}}
	} else {
		req.RawInputContents = append(req.RawInputContents, frame([]byte(prompt)))
	}
	if name := llmStreamInput(m); name != "" && stream {
		in := &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: "BOOL", Shape: shape}
		req.Inputs = append(req.Inputs, in)
		if typed {
			in.Contents = &inference.InferTensorContents{BoolContents: []bool{true}}
		} else {
			req.RawInputContents = append(req.RawInputContents, []byte{1})
		}
	}
	return req
}

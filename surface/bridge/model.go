package bridge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync/atomic"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
)

// Platform and backend every bridge model reports in its config and metadata.
const (
	Platform = "openai"
	Backend  = "infergate_bridge"
)

// Tensor names of the LLM contract.
const (
	inText      = "text_input"
	inStream    = "stream"
	inStreaming = "streaming"
	inSampling  = "sampling_parameters"
	outText     = "text_output"
	outReason   = "finish_reason"
)

// The tensors a model with a Granite processor adds to the contract (WithChatResult).
const (
	// InputChatTemplateKwargs is an optional BYTES [1] input holding a JSON object: the chat
	// request's chat_template_kwargs, where Granite's documents, controls, thinking and
	// sanitize go, as vLLM's chat API takes them.
	InputChatTemplateKwargs = "chat_template_kwargs"
	// OutputChatResult is a BYTES [-1] output, one element per choice: the assistant message as
	// JSON (role, content, reasoning_content, tool_calls, citations, documents, hallucinations,
	// and parse_error when the model's output could not be parsed).
	OutputChatResult = "chat_result"
)

// contract declares the bridge models' tensors once; config builds each model's ModelConfig from it.
var contract = struct {
	inputs  []*inference.ModelInput
	outputs []*inference.ModelOutput
}{
	inputs: []*inference.ModelInput{
		{Name: inText, DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}},
		{Name: inStream, DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
		{Name: inStreaming, DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
		{Name: inSampling, DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}, Optional: true},
	},
	outputs: []*inference.ModelOutput{
		{Name: outText, DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}},
		{Name: outReason, DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}},
	},
}

func config(name string, chatResult bool) *inference.ModelConfig {
	cfg := &inference.ModelConfig{Name: name, Platform: Platform, Backend: Backend}
	for _, in := range contract.inputs {
		cfg.Input = append(cfg.Input, &inference.ModelInput{Name: in.Name, DataType: in.DataType, Dims: append([]int64(nil), in.Dims...), Optional: in.Optional})
	}
	for _, out := range contract.outputs {
		cfg.Output = append(cfg.Output, &inference.ModelOutput{Name: out.Name, DataType: out.DataType, Dims: append([]int64(nil), out.Dims...)})
	}
	if chatResult {
		cfg.Input = append(cfg.Input, &inference.ModelInput{Name: InputChatTemplateKwargs, DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}, Optional: true})
		cfg.Output = append(cfg.Output, &inference.ModelOutput{Name: OutputChatResult, DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}})
	}
	return cfg
}

// model is one OpenAI model served as a KServe model. It implements engines.RequestDecoupler (a
// request with stream true is answered as a stream) and engines.InputReshaper ([1,1] inputs).
type model struct {
	cfg   *inference.ModelConfig
	proxy *openai.Proxy
	chat  atomic.Bool // the proxy's endpoints for it are of kind chat; Sync may change it
	// chatResult: the model has a Granite processor. It always takes chat (the processor
	// renders the prompt from it), and has chat_template_kwargs and chat_result.
	chatResult bool
}

func newModel(name, kind string, proxy *openai.Proxy, chatResult bool) *model {
	m := &model{cfg: config(name, chatResult), proxy: proxy, chatResult: chatResult}
	m.setKind(kind)
	return m
}

func (m *model) setKind(kind string) { m.chat.Store(kind == upstream.KindChat) }

func (m *model) Config() *inference.ModelConfig { return m.cfg }

// RequestDecoupled reports whether the request's stream or streaming input is true.
func (m *model) RequestDecoupled(req *engines.Request) bool {
	for _, name := range []string{inStream, inStreaming} {
		if t := req.Input(name); t != nil && len(t.Data) > 0 && t.Data[0] != 0 {
			return true
		}
	}
	return false
}

// ReshapeInputs accepts [1,1] for the [1] inputs, as Dynamo does for text_input: clients written
// for batching LLM models (TensorRT-LLM's ensembles) send that shape.
func (m *model) ReshapeInputs(req *engines.Request) {
	for i := range req.Inputs {
		if s := req.Inputs[i].Shape; len(s) == 2 && s[0] == 1 && s[1] == 1 {
			req.Inputs[i].Shape = []int64{1}
		}
	}
}

// maxResponseBytes bounds a non-streaming upstream answer the bridge reads whole.
const maxResponseBytes = 64 << 20

// Execute sends the request upstream and answers the completion: folded into one response, or as
// a stream of responses when the request asks for one.
func (m *model) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	text, err := firstElement(req, inText)
	if err != nil {
		return err
	}
	if text == nil {
		return invalid("Missing required input: '%s'", inText)
	}
	sampling, err := firstElement(req, inSampling)
	if err != nil {
		return err
	}
	var kwargs []byte
	if m.chatResult {
		if kwargs, err = firstElement(req, InputChatTemplateKwargs); err != nil {
			return err
		}
	}
	stream := m.RequestDecoupled(req)
	chat := m.chat.Load() || m.chatResult
	body, n, err := requestBody(m.cfg.GetName(), chat, text, stream, sampling, kwargs)
	if err != nil {
		return err
	}
	path := "/v1/completions"
	if chat {
		path = "/v1/chat/completions"
	}
	if req.ID != "" {
		ctx = pipeline.WithRequestID(ctx, req.ID)
	}
	res, err := m.proxy.Call(ctx, path, body)
	if err != nil {
		return callError(err)
	}
	defer res.Close()
	if res.StatusCode != http.StatusOK {
		return upstreamStatus(res)
	}
	if !stream {
		b, err := io.ReadAll(io.LimitReader(res, maxResponseBytes+1))
		if err != nil {
			return readError(ctx, res, err)
		}
		if len(b) > maxResponseBytes {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("upstream '%s' answered more than %d bytes", res.Endpoint, maxResponseBytes))
		}
		acc := newAccumulator(n, m.wantsResult(req))
		if _, err := acc.add(b); err != nil {
			return upstreamInvalid(res, err)
		}
		acc.parseErrors(res.Header)
		out := acc.response(true)
		out.Final = false // one response, not the last of a stream
		return send(out)
	}
	return relay(ctx, res, newAccumulator(n, m.wantsResult(req)), send)
}

// sent passes err, a streamed response's failure to reach the client (its client gone, or the
// response not encodable for it), on to res's body as the client's failure: a stage that keeps
// what went through, a session turn, must not keep an answer its client never got. It returns
// err.
func sent(res *pipeline.Response, err error) error {
	if err != nil {
		res.Body.Finish(err)
	}
	return err
}

// wantsResult reports whether the answer to req carries chat_result: the model has it, and the
// request asks for every output or names it.
func (m *model) wantsResult(req *engines.Request) bool {
	return m.chatResult && (len(req.Outputs) == 0 || slices.Contains(req.Outputs, OutputChatResult))
}

// relay sends one response per upstream chunk that carries choices. Responses carry each choice's
// delta text and finish_reason "", and are not final while some choice is still going; the chunk
// that finishes the last choice is held back until the upstream ends, and then sent as the one
// final response, with every choice's finish_reason. When the upstream ends otherwise (no
// finish_reason), a final response with empty texts ends the stream.
func relay(ctx context.Context, res *pipeline.Response, acc *accumulator, send func(*engines.Response) error) error {
	acc.parseErrors(res.Header) // a replayed answer's; a parsed stream's come on its finish chunks
	events := pipeline.NewEvents(res)
	for {
		data, err := events.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return readError(ctx, res, err)
		}
		ok, err := acc.add(data)
		if err != nil {
			return upstreamInvalid(res, err)
		}
		if ok && !acc.done() {
			if err := send(acc.response(false)); err != nil {
				return sent(res, err)
			}
		}
	}
	return sent(res, send(acc.response(true)))
}

// response builds one response with one text_output and one finish_reason element per choice.
func response(texts [][]byte, reasons []string, final bool) *engines.Response {
	n := int64(len(texts))
	return &engines.Response{Final: final, Outputs: []engines.Tensor{
		{Name: outText, Datatype: inference.DataType_TYPE_STRING, Shape: []int64{n}, Data: tensor.JoinBytes(texts)},
		{Name: outReason, Datatype: inference.DataType_TYPE_STRING, Shape: []int64{n}, Data: tensor.JoinBytes(reasons)},
	}}
}

// firstElement returns the first BYTES element of the named input (nil when the input is absent).
// Validation has checked the framing and that there is exactly one; this only guards the reads.
func firstElement(req *engines.Request, name string) ([]byte, error) {
	t := req.Input(name)
	if t == nil {
		return nil, nil
	}
	d := t.Data
	if len(d) < 4 || uint64(binary.LittleEndian.Uint32(d)) > uint64(len(d)-4) {
		return nil, invalid("input '%s' holds no BYTES element", name)
	}
	return d[4 : 4+binary.LittleEndian.Uint32(d)], nil
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

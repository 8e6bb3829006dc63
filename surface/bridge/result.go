package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// answer is what the bridge reads of a completion, a chat completion, or a chunk of either.
type answer struct {
	Choices []choice `json:"choices"`
}

type choice struct {
	Index        int     `json:"index"`
	Text         *string `json:"text"`    // completions
	Message      *delta  `json:"message"` // chat
	Delta        *delta  `json:"delta"`   // chat chunks
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Content *string `json:"content"`
	// The rest of an assistant message, which only a model with chat_result reads (chatResult.add):
	// what the Granite stage answers besides content (in a stream, Granite's members and
	// parse_error come on a choice's finish chunk). Kept raw, so that other models' answers
	// read as before whatever an upstream puts there.
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	Citations        json.RawMessage `json:"citations"`
	Documents        json.RawMessage `json:"documents"`
	Hallucinations   json.RawMessage `json:"hallucinations"`
	ParseError       json.RawMessage `json:"parse_error"`
}

// message is the chat message or delta of the choice (nil for a completion).
func (c *choice) message() *delta {
	if c.Message != nil {
		return c.Message
	}
	return c.Delta
}

func (c *choice) text() string {
	switch {
	case c.Text != nil:
		return *c.Text
	case c.Message != nil && c.Message.Content != nil:
		return *c.Message.Content
	case c.Delta != nil && c.Delta.Content != nil:
		return *c.Delta.Content
	}
	return ""
}

func (c *choice) reason() string {
	if c.FinishReason == nil {
		return ""
	}
	return *c.FinishReason
}

// decodeAnswer parses one upstream answer or chunk, turning an error object in it into the error.
func decodeAnswer(b []byte) (*answer, error) {
	if obj, status, ok := httpapi.ParseEvent(b); ok {
		return nil, eventError(obj, status, b)
	}
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("not an OpenAI response: %w", err)
	}
	for i := range a.Choices {
		if x := a.Choices[i].Index; x < 0 || x >= maxChoices {
			return nil, fmt.Errorf("choice index %d is out of range [0, %d)", x, maxChoices)
		}
	}
	return &a, nil
}

// accumulator gathers a stream's choices between the responses sent for it, or a whole answer's.
type accumulator struct {
	texts   [][]byte // per choice: text not yet sent
	reasons []string // per choice: finish_reason once it came
	ended   int      // choices with a finish_reason

	// results, when the model has chat_result and the request wants it: per choice, its whole
	// message so far; kept counts their bytes, bounded by maxResponseBytes.
	results     []*chatResult
	withResults bool
	kept        int
}

// newAccumulator gathers at least n choices; results asks for their chat_result.
func newAccumulator(n int, results bool) *accumulator {
	a := &accumulator{withResults: results}
	a.grow(max(n, 1))
	return a
}

func (a *accumulator) grow(width int) {
	for len(a.texts) < width {
		a.texts = append(a.texts, nil)
		a.reasons = append(a.reasons, "")
		if a.withResults {
			a.results = append(a.results, &chatResult{})
		}
	}
}

func (a *accumulator) apply(cs []choice) error {
	for i := range cs {
		c := &cs[i]
		a.grow(c.Index + 1)
		a.texts[c.Index] = append(a.texts[c.Index], c.text()...)
		if r := c.reason(); r != "" && a.reasons[c.Index] == "" {
			a.reasons[c.Index] = r
			a.ended++
		}
		if m := c.message(); a.withResults && m != nil {
			n, err := a.results[c.Index].add(m)
			if err != nil {
				return err
			}
			if a.kept += n; a.kept > maxResponseBytes {
				return fmt.Errorf("an answer of more than %d bytes", maxResponseBytes)
			}
		}
	}
	return nil
}

// add takes one chunk's data, or a whole answer, and reports whether it carried choices (usage
// chunks carry none).
func (a *accumulator) add(data []byte) (bool, error) {
	ans, err := decodeAnswer(data)
	if err != nil {
		return false, err
	}
	if err := a.apply(ans.Choices); err != nil {
		return false, err
	}
	return len(ans.Choices) > 0, nil
}

// parseErrors adds the parse problems the Granite stage reported in the answer's header, for
// the choices whose message did not carry its parse_error whole.
func (a *accumulator) parseErrors(h http.Header) {
	if !a.withResults {
		return
	}
	headerParseErrors(h, func(i int, problem string) {
		if i < len(a.results) && len(a.results[i].parseErrors) == 0 {
			a.results[i].parseErrors = append(a.results[i].parseErrors, problem)
		}
	})
}

// done reports whether every choice has finished.
func (a *accumulator) done() bool { return a.ended >= len(a.texts) }

// take returns the texts gathered since the last take, and the finish reasons when final ("" for
// every choice otherwise), and starts gathering anew.
func (a *accumulator) take(final bool) (texts [][]byte, reasons []string, _ bool) {
	reasons = make([]string, len(a.texts))
	if final {
		copy(reasons, a.reasons)
	}
	texts = make([][]byte, len(a.texts))
	copy(texts, a.texts)
	clear(a.texts)
	return texts, reasons, final
}

// response takes what was gathered as one response: text_output and finish_reason, and
// chat_result when the accumulator gathers it (each choice's JSON in the final response, ""
// before it, as finish_reason is).
func (a *accumulator) response(final bool) *engines.Response {
	res := response(a.take(final))
	if !a.withResults {
		return res
	}
	els := make([][]byte, len(a.results))
	if final {
		for i, r := range a.results {
			els[i] = r.json()
		}
	}
	res.Outputs = append(res.Outputs, engines.Tensor{Name: OutputChatResult, Datatype: inference.DataType_TYPE_STRING,
		Shape: []int64{int64(len(els))}, Data: tensor.JoinBytes(els)})
	return res
}

// callError maps a failed Call: the gateway's own OpenAI errors by their status, a cancelled or
// expired context as itself (the KServe layer gives it its code), anything else UNAVAILABLE.
func callError(err error) error {
	var oe *pipeline.Error
	switch {
	case errors.As(err, &oe):
		return connect.NewError(httpapi.Code(httpapi.KServe, oe.Status), errors.New(validUTF8(oe.Message)))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// upstreamStatus turns an upstream's error answer into an error with its status's code and its
// message.
func upstreamStatus(res *pipeline.Response) error {
	b, _ := io.ReadAll(io.LimitReader(res, 64<<10))
	return connect.NewError(httpapi.Code(httpapi.KServe, res.StatusCode),
		fmt.Errorf("upstream '%s' answered HTTP %d: %s", res.Endpoint, res.StatusCode, upstreamMessage(res.StatusCode, b)))
}

// upstreamMessage is the message of an upstream's error body; failing that, the body itself
// (clipped), or the status's text when the body is empty.
func upstreamMessage(status int, body []byte) string {
	if obj, ok := httpapi.ParseBody(status, body); ok {
		return obj.Message
	}
	if msg := clipMessage(bytes.TrimSpace(body)); msg != "" {
		return msg
	}
	return http.StatusText(status)
}

// eventError is the error an upstream reported in band (ParseEvent's obj and status): its
// status's code, its message or, failing that, the event itself (clipped).
func eventError(obj httpapi.Object, status int, data []byte) error {
	msg := obj.Message
	if msg == "" {
		msg = clipMessage(bytes.TrimSpace(data))
	}
	return connect.NewError(httpapi.Code(httpapi.KServe, status), errors.New(msg))
}

// upstreamInvalid reports an answer the bridge cannot read (or an error object inside it).
func upstreamInvalid(res *pipeline.Response, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return connect.NewError(ce.Code(), fmt.Errorf("upstream '%s' reported an error: %s", res.Endpoint, ce.Message()))
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf("upstream '%s' sent %w", res.Endpoint, err))
}

// readError reports a body that stopped: the caller's cancellation as itself, an upstream that
// failed mid-answer as UNAVAILABLE.
func readError(ctx context.Context, res *pipeline.Response, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("upstream '%s' failed mid-answer: %v", res.Endpoint, err))
}

func validUTF8(s string) string { return strings.ToValidUTF8(s, "\ufffd") }

func clipMessage(b []byte) string { return clip(b, 512) }

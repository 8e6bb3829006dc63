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
	"github.com/infergate/infergate/adapters/pipeline"
)

// answer is what the bridge reads of a completion, a chat completion, or a chunk of either.
type answer struct {
	Choices []choice        `json:"choices"`
	Error   json.RawMessage `json:"error"`
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
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("not an OpenAI response: %w", err)
	}
	if len(a.Error) > 0 && string(a.Error) != "null" {
		return nil, errorObject(a.Error)
	}
	for i := range a.Choices {
		if x := a.Choices[i].Index; x < 0 || x >= maxChoices {
			return nil, fmt.Errorf("choice index %d is out of range [0, %d)", x, maxChoices)
		}
	}
	return &a, nil
}

// fold reads a whole (non-streaming) answer: one text and one finish_reason per choice, ordered by
// choice index, at least n of them.
func fold(b []byte, n int) ([][]byte, []string, error) {
	a, err := decodeAnswer(b)
	if err != nil {
		return nil, nil, err
	}
	acc := newAccumulator(n)
	acc.apply(a.Choices)
	texts, reasons, _ := acc.take(true)
	return texts, reasons, nil
}

// accumulator gathers a stream's choices between the responses sent for it.
type accumulator struct {
	texts   [][]byte // per choice: text not yet sent
	reasons []string // per choice: finish_reason once it came
	ended   int      // choices with a finish_reason
}

func newAccumulator(n int) *accumulator {
	a := &accumulator{}
	a.grow(max(n, 1))
	return a
}

func (a *accumulator) grow(width int) {
	for len(a.texts) < width {
		a.texts = append(a.texts, nil)
		a.reasons = append(a.reasons, "")
	}
}

func (a *accumulator) apply(cs []choice) {
	for i := range cs {
		c := &cs[i]
		a.grow(c.Index + 1)
		a.texts[c.Index] = append(a.texts[c.Index], c.text()...)
		if r := c.reason(); r != "" && a.reasons[c.Index] == "" {
			a.reasons[c.Index] = r
			a.ended++
		}
	}
}

// add takes one chunk's data and reports whether it carried choices (usage chunks carry none).
func (a *accumulator) add(data []byte) (bool, error) {
	ans, err := decodeAnswer(data)
	if err != nil {
		return false, err
	}
	a.apply(ans.Choices)
	return len(ans.Choices) > 0, nil
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

// callError maps a failed Call: the gateway's own OpenAI errors by their status, a cancelled or
// expired context as itself (the KServe layer gives it its code), anything else UNAVAILABLE.
func callError(err error) error {
	var oe *pipeline.Error
	switch {
	case errors.As(err, &oe):
		return connect.NewError(codeOf(oe.Status), errors.New(validUTF8(oe.Message)))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// codeOf maps an HTTP status from the OpenAI side to a gRPC code.
func codeOf(status int) connect.Code {
	switch {
	case status == http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case status == http.StatusForbidden:
		return connect.CodePermissionDenied
	case status == http.StatusNotFound:
		return connect.CodeNotFound
	case status == http.StatusTooManyRequests, status == http.StatusBadGateway,
		status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout:
		return connect.CodeUnavailable
	case status >= 400 && status < 500:
		return connect.CodeInvalidArgument
	}
	return connect.CodeInternal
}

// upstreamStatus turns an upstream's error answer into an error with its status's code and its
// message.
func upstreamStatus(res *pipeline.Response) error {
	b, _ := io.ReadAll(io.LimitReader(res, 64<<10))
	msg := errorMessage(b)
	if msg == "" {
		msg = http.StatusText(res.StatusCode)
	}
	return connect.NewError(codeOf(res.StatusCode), fmt.Errorf("upstream '%s' answered HTTP %d: %s", res.Endpoint, res.StatusCode, msg))
}

// errorMessage finds the message in an error body: OpenAI's {"error":{"message"}}, vLLM's
// {"object":"error","message"}, {"error":"..."}, FastAPI's {"detail":...}; else the body itself.
func errorMessage(b []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &e) == nil {
		switch {
		case len(e.Error) > 0 && string(e.Error) != "null":
			var inner struct {
				Message string `json:"message"`
			}
			var s string
			if json.Unmarshal(e.Error, &s) == nil && s != "" {
				return validUTF8(s)
			}
			if json.Unmarshal(e.Error, &inner) == nil && inner.Message != "" {
				return validUTF8(inner.Message)
			}
		case e.Message != "":
			return validUTF8(e.Message)
		case len(e.Detail) > 0:
			return clipMessage(e.Detail)
		}
	}
	return clipMessage(bytes.TrimSpace(b))
}

// errorObject is the error an upstream reported inside a stream: its code when it names an HTTP
// status, else INTERNAL.
func errorObject(raw json.RawMessage) error {
	var e struct {
		Code json.RawMessage `json:"code"`
	}
	code := connect.CodeInternal
	if json.Unmarshal(raw, &e) == nil {
		var status int
		if json.Unmarshal(e.Code, &status) == nil && status >= 400 && status < 600 {
			code = codeOf(status)
		}
	}
	return connect.NewError(code, errors.New(errorMessage([]byte(`{"error":`+string(raw)+`}`))))
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

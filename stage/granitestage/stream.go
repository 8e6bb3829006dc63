package granitestage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/jsonwire"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/lib/openaiwire"
)

// maxStreamChoices bounds the choices one streamed answer may carry (each holds its text).
const maxStreamChoices = 128

// stream answers a stream: true request incrementally: the upstream is asked for a stream of
// the rendered prompt's completion, and each of its text deltas goes through the output
// processor's OutputStream, whose certain reasoning and content go out as chat chunks at once.
// Each choice's tool calls, Granite extras and finish reason follow when the upstream finishes
// it. An upstream that answers whole anyway is answered as the replay path answers.
func (b *backend) stream(ctx context.Context, s *granite.Simple, sp granite.StreamOutputProcessor, in *granite.ChatRequest, f map[string]json.RawMessage, o *Options) (*pipeline.Response, error) {
	g, err := s.Prepare(in)
	if err != nil {
		var ve *granite.ValidationError
		if errors.As(err, &ve) {
			return nil, pipeline.InvalidRequest("", ve.Rule, ve.Msg)
		}
		return nil, err
	}
	so := f["stream_options"]
	if so == nil {
		so = json.RawMessage{}
	}
	out, err := b.request(g, so)
	if err != nil {
		return nil, err
	}
	res, err := b.next(ctx, out)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return res, nil // unchanged: an error object reads the same in both APIs
	}
	if !res.Stream {
		gens, err := b.take(res)
		if err != nil {
			return nil, err
		}
		return b.answer(b.req, f, o, sp.Parse(gens, in))
	}
	model := ""
	_ = json.Unmarshal(b.model, &model)
	header := http.Header{}
	b.debug(header)
	header.Set("Content-Type", "text/event-stream")
	header.Set("Cache-Control", "no-cache")
	body := &chatStream{Body: res.Body, ev: pipeline.NewEvents(res.Body), sp: sp, in: in, max: o.MaxAnswerBytes,
		head: openaiwire.Chunk{Header: openaiwire.Header{ID: o.NewID(), Object: "chat.completion.chunk", Created: o.Now().Unix(), Model: model}}}
	return &pipeline.Response{StatusCode: http.StatusOK, Stream: true, Header: header, GatewayHeader: res.GatewayHeader,
		Endpoint: res.Endpoint, Model: res.Model, BackendType: res.BackendType, Body: body}, nil
}

type choiceState struct {
	parse    granite.OutputStream
	finished bool
}

// chatStream is the chat stream made of an upstream's completion stream. Finish and Err are
// the upstream body's, so metering counts what the upstream sent.
type chatStream struct {
	pipeline.Body
	ev *pipeline.Events
	sp granite.StreamOutputProcessor
	in *granite.ChatRequest
	// head is every chunk's id, object, created, model and fingerprint; each chunk written is
	// head with its choices (one, from one, or none and a usage), in openaiwire's layout with
	// the fingerprint after model, where the stage's chunks have always had it.
	head openaiwire.Chunk
	one  [1]openaiwire.ChunkChoice // the choices of the chunk being written
	max  int

	read int // text bytes read from the upstream
	// prefix and suffix frame a hand-written delta chunk (emitText) for the model in prefixModel.
	prefix, suffix []byte
	prefixModel    string
	choices        map[int]*choiceState
	// out holds the chunks written and not yet read, from off; once read it is emptied and
	// written again from its start, so a stream reuses one buffer for its chunks.
	out []byte
	off int
	// up is the upstream chunk being read, reused from chunk to chunk.
	up  openaiwire.Completion
	err error
}

var errStreamTooLarge = errors.New("granitestage: the upstream's streamed answer is over the bound")

func (c *chatStream) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		data, err := c.ev.Next()
		switch {
		case errors.Is(err, io.EOF) && c.Body.Err() == nil:
			c.finishAll()
			c.out, c.err = append(c.out, "data: [DONE]\n\n"...), io.EOF
			continue
		case errors.Is(err, io.EOF):
			c.err = c.Body.Err()
			continue
		case err != nil:
			c.err = err
			continue
		}
		if err := c.take(data); err != nil {
			c.err = err
		}
	}
	n := copy(p, c.out[c.off:])
	if c.off += n; c.off == len(c.out) {
		c.out, c.off = c.out[:0], 0
	}
	return n, nil
}

// present says whether a raw member was sent with a value other than null.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// take turns one upstream chunk into chat chunks.
func (c *chatStream) take(data []byte) error {
	up := &c.up
	if err := openaiwire.DecodeCompletionChunk(data, up); err != nil {
		return fmt.Errorf("granitestage: an upstream chunk is not a completion chunk: %w", err)
	}
	if present(up.Error) {
		c.emitRaw(data) // an upstream failing mid-stream: its error event passes on as it came
		return nil
	}
	if up.Model != "" {
		c.head.Model = up.Model
	}
	if present(up.SystemFingerprint) {
		c.head.SystemFingerprint = up.SystemFingerprint
	}
	for _, ch := range up.Choices {
		st, err := c.choice(ch.Index)
		if err != nil {
			return err
		}
		if st.finished {
			continue
		}
		if c.read += len(ch.Text); c.read > c.max {
			return errStreamTooLarge
		}
		c.delta(ch.Index, st.parse.Write(ch.Text))
		if ch.FinishReason != nil {
			c.finish(ch.Index, st, *ch.FinishReason, ch.StopReason)
		}
	}
	if up.Usage != nil { // present and not null, passed on as it came
		h := c.head
		h.Choices, h.Usage = []openaiwire.ChunkChoice{}, up.Usage
		c.emit(&h)
	}
	return nil
}

// choice returns choice i's state, starting it (and sending its role chunk) when new.
func (c *chatStream) choice(i int) (*choiceState, error) {
	if st, ok := c.choices[i]; ok {
		return st, nil
	}
	if i < 0 || i >= maxStreamChoices {
		return nil, fmt.Errorf("granitestage: upstream chunk for choice %d", i)
	}
	if c.choices == nil {
		c.choices = map[int]*choiceState{}
	}
	st := &choiceState{parse: c.sp.ParseStream(c.in)}
	c.choices[i] = st
	empty := ""
	c.emitChoice(openaiwire.ChunkChoice{Index: i, Delta: &openaiwire.Delta{Role: "assistant", Content: &empty}})
	return st, nil
}

func (c *chatStream) delta(i int, d granite.Delta) {
	if d.Reasoning != "" {
		c.emitText(i, "reasoning_content", d.Reasoning)
	}
	if d.Content != "" {
		c.emitText(i, "content", d.Content)
	}
}

// emitText sends a one-member delta chunk, written by hand: it is the one sent per upstream
// chunk, and the same as emitChoice's encoding of it (TestEmitTextIsEmitChoice). Its head is
// written once per model, around an empty list of choices.
func (c *chatStream) emitText(i int, member, text string) {
	if c.prefix == nil || c.prefixModel != c.head.Model {
		h := c.head
		h.Choices = []openaiwire.ChunkChoice{}
		h.Usage = nil // a text chunk carries none: the empty list is the object's last member
		b := h.AppendJSON(nil, openaiwire.Options{})
		// {...,"choices":[]} -> up to and including the list's "[", cut from the end: an object
		// fingerprint may itself hold `"choices":[]` (a search from the start once put the text
		// inside the fingerprint).
		at := len(b) - len(`]}`)
		c.prefix, c.suffix, c.prefixModel = b[:at:at], b[at:], c.head.Model
	}
	c.out = append(c.out, "data: "...)
	c.out = append(c.out, c.prefix...)
	c.out = append(c.out, `{"index":`...)
	c.out = strconv.AppendInt(c.out, int64(i), 10)
	c.out = append(c.out, `,"delta":{"`...)
	c.out = append(c.out, member...)
	c.out = append(c.out, `":`...)
	c.out = appendJSONString(c.out, text)
	c.out = append(c.out, `},"logprobs":null,"finish_reason":null}`...)
	c.out = append(c.out, c.suffix...)
	c.out = append(c.out, "\n\n"...)
}

// appendJSONString appends s as a JSON string as encoding/json writes it (HTML characters and
// U+2028/U+2029 escaped, invalid UTF-8 as U+FFFD).
func appendJSONString(dst []byte, s string) []byte {
	return jsonwire.AppendString(dst, s, jsonwire.EncodingJSON)
}

// finish parses choice i's whole text and sends what the stream had not yet let out, its tool
// calls, and its finish chunk with Granite's extras.
func (c *chatStream) finish(i int, st *choiceState, reason string, stopReason json.RawMessage) {
	st.finished = true
	rest, m, mismatch := st.parse.Close(reason)
	c.delta(i, rest)
	for j, tc := range m.ToolCalls {
		// The writer leaves an empty id or type out (a later piece of a call has none), where
		// the stage's former struct wrote them: the same bytes here, since a Granite tool call
		// comes whole, with an id (call_i_j at least) and its type.
		d := openaiwire.ToolCallDelta{Index: j, ID: tc.ID, Type: "function",
			Function: openaiwire.Function{Name: tc.Name, Arguments: string(tc.Arguments)}}
		if d.ID == "" {
			d.ID = fmt.Sprintf("call_%d_%d", i, j)
		}
		if d.Function.Arguments == "" {
			d.Function.Arguments = "{}"
		}
		c.emitChoice(openaiwire.ChunkChoice{Index: i, Delta: &openaiwire.Delta{ToolCalls: []openaiwire.ToolCallDelta{d}}})
	}
	if reason == "" {
		reason = "stop"
	}
	if len(m.ToolCalls) > 0 {
		reason = "tool_calls"
	}
	// parse_error is the stream's form of ParseErrorHeader (sent before the answer was known):
	// the whole answer's, and, should what was streamed ever differ from the whole answer's
	// parse (a bug: FuzzStreamIsWholeAnswer holds the two equal), how.
	perr := m.ParseError
	if mismatch != "" {
		perr = joinNonEmpty(perr, mismatch)
	}
	if len(stopReason) == 0 || string(stopReason) == "null" {
		stopReason = nil
	}
	c.emitChoice(openaiwire.ChunkChoice{Index: i, FinishReason: &reason, StopReason: stopReason, Delta: &openaiwire.Delta{
		Extra: appendExtras(nil, m.Citations, m.Documents, m.Hallucinations, perr)}})
}

func joinNonEmpty(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// finishAll finishes the choices the upstream ended without a finish reason.
func (c *chatStream) finishAll() {
	for _, i := range slices.Sorted(maps.Keys(c.choices)) {
		if st := c.choices[i]; !st.finished {
			c.finish(i, st, "stop", nil)
		}
	}
}

// emitChoice sends a chunk of one choice.
func (c *chatStream) emitChoice(ch openaiwire.ChunkChoice) {
	h := c.head
	c.one[0] = ch
	h.Choices = c.one[:]
	c.emit(&h)
}

// emit writes h as a server-sent event.
func (c *chatStream) emit(h *openaiwire.Chunk) {
	c.out = append(c.out, "data: "...)
	c.out = h.AppendJSON(c.out, openaiwire.Options{})
	c.out = append(c.out, "\n\n"...)
}

func (c *chatStream) emitRaw(b []byte) {
	c.out = append(c.out, "data: "...)
	c.out = append(c.out, b...)
	c.out = append(c.out, "\n\n"...)
}

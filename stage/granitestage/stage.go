// Package granitestage serves a model configured with a Granite processor
// (lib/granite) on OpenAI's chat completions API: a pipeline stage that decodes the
// chat request into Granite's ChatRequest (messages, tools, and Granite's own documents,
// controls, thinking and sanitize, read from the body's top level or from chat_template_kwargs
// as vLLM clients send them), renders the prompt the model was trained on, sends it as a
// /v1/completions request through the rest of the chain (routing, failover and breakers
// apply), and answers with a chat completion built by the output processor: content,
// reasoning_content, tool_calls, and Granite's citations, documents and hallucinations as extra
// members of the message.
//
// A request Granite's prompt format cannot express is a 400 naming the rule, before any upstream
// call. Model output the parser cannot read is answered as content (the answer cleaned as usual,
// the sections it cannot parse after it as the model wrote them), with an
// X-Infergate-Granite-Parse-Error header: never a 500. An upstream's error answer passes on
// unchanged.
//
// Streaming: a request with stream: true asks the upstream for a stream and parses it as it
// comes (granite.OutputStream): reasoning goes out as delta.reasoning_content and the answer as
// delta.content while the model is still generating, holding back only what the parser may still
// need (a suffix that may become a marker, section header or closing tag; trailing whitespace;
// a completion that may be a tool call, or whose shape only its end decides). Each choice's tool
// calls arrive whole and Granite's citations, documents and hallucinations ride on its finish
// chunk, which also carries the whole answer's parse_error. The deltas put together are the
// whole answer's content and reasoning, for any model output (FuzzStreamIsWholeAnswer); the one
// difference is a thought the model never closed, let out as reasoning on the way, which the
// whole answer has as content (its parse_error says so). A stream holds its choices' text (at
// most MaxAnswerBytes in all: the finish chunk parses it whole) and what it let out. An
// entry with its own IO processor (Entry.NewIO, which may call the upstream several times) is
// answered by replaying its whole result as server-sent events.
package granitestage

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/chatstream"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/lib/openaiwire"
)

const (
	chatPath       = chatstream.ChatPath
	completionPath = chatstream.CompletionPath

	// DebugHeader, sent as "X-Infergate-Debug: prompt", asks for the rendered prompt back in
	// PromptHeader (base64 of its first MaxDebugPrompt bytes).
	DebugHeader = "X-Infergate-Debug"
	// PromptHeader carries the rendered prompt of the last upstream call, base64 (standard).
	PromptHeader = "X-Infergate-Granite-Prompt"
	// ParseErrorHeader says why a choice's output could not be parsed (its content then ends
	// with the part the parser could not read, as the model wrote it).
	ParseErrorHeader = "X-Infergate-Granite-Parse-Error"

	// MaxDebugPrompt bounds the prompt echoed in PromptHeader.
	MaxDebugPrompt   = 32 << 10
	defaultMaxAnswer = 16 << 20
)

// Options configure the stage. The zero value is usable.
type Options struct {
	// MaxAnswerBytes bounds an upstream's whole answer the stage reads (default 16 MiB); a
	// longer one is a 502.
	MaxAnswerBytes int
	// NewID makes a chat completion's id, "chatcmpl-" and a random hex string by default.
	NewID func() string
	// Now is the chat completion's created time (default time.Now).
	Now func() time.Time
	// MayDebug says whether a request's caller may have its rendered prompt back
	// (DebugHeader); nil lets every caller. The runtime lets admin keys only, when keys are on:
	// the prompt holds the system prompt and documents an operator may not want shown.
	MayDebug func(ctx context.Context) bool
	// Logger, when set, gets each rendered prompt and each raw model output at debug level.
	Logger *slog.Logger
}

// Stage is the interceptor for a model whose prompts are rendered by e (a granite.Registry
// entry): its /v1/chat/completions requests become /v1/completions of the rendered prompt, with
// the model's name unchanged, and their answers chat completions parsed by e's output processor.
// Other paths pass on untouched. With e.NewIO set, the IO processor it builds decides how many
// upstream calls a request makes; otherwise one (granite.NewSimple).
func Stage(e granite.Entry, o Options) pipeline.Interceptor {
	if o.MaxAnswerBytes <= 0 {
		o.MaxAnswerBytes = defaultMaxAnswer
	}
	if o.NewID == nil {
		o.NewID = newID
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	bufs := &buffers{}
	return func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			if req.Path != chatPath {
				return next(ctx, req)
			}
			return chat(ctx, e, &o, bufs, req, next)
		}
	}
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "chatcmpl-" + hex.EncodeToString(b[:])
}

func chat(ctx context.Context, e granite.Entry, o *Options, bufs *buffers, req *pipeline.Request, next pipeline.Handler) (*pipeline.Response, error) {
	f, err := req.Fields() // from the request's one parsed view, shared with the other stages
	if err != nil {
		return nil, pipeline.InvalidJSON(err)
	}
	in, err := decode(f)
	if err != nil {
		return nil, err
	}
	b := &backend{next: next, req: req, model: f["model"], max: o.MaxAnswerBytes, bufs: bufs, log: o.Logger,
		mayDebug: o.MayDebug == nil || o.MayDebug(ctx)}
	if sp, ok := e.Output.(granite.StreamOutputProcessor); ok && req.Stream() && e.NewIO == nil {
		return b.stream(ctx, granite.NewSimple(e.Input, e.Output, nil), sp, in, f, o)
	}
	var iop granite.IOProcessor
	if e.NewIO != nil {
		iop = e.NewIO(b)
	} else {
		iop = granite.NewSimple(e.Input, e.Output, b)
	}
	results, err := iop.Chat(ctx, in)
	if err != nil {
		var ve *granite.ValidationError
		var up *upstreamAnswer
		switch {
		case errors.As(err, &ve):
			return nil, pipeline.InvalidRequest("", ve.Rule, ve.Msg)
		case errors.As(err, &up):
			return up.res, up.err // unchanged: an error object reads the same in both APIs
		}
		return nil, err
	}
	return b.answer(req, f, o, results)
}

// upstreamAnswer is an upstream call that did not give a completion: its error, or its non-200
// response, which the stage returns as it came.
type upstreamAnswer struct {
	res *pipeline.Response
	err error
}

func (u *upstreamAnswer) Error() string {
	if u.err != nil {
		return u.err.Error()
	}
	return "upstream answered " + strconv.Itoa(u.res.StatusCode)
}

// backend is a granite.Backend over the rest of one request's chain: each Generate is a
// /v1/completions request through next.
type backend struct {
	next  pipeline.Handler
	req   *pipeline.Request
	model json.RawMessage
	max   int
	bufs  *buffers

	// What the calls so far got: the last completion's metadata and answer, usage summed.
	last  *pipeline.Response
	got   openaiwire.Completion
	usage pipeline.Usage
	// total is the answers' usage summed, when one had usage (hasTotal): held here, not
	// behind its own pointer, since the backend lives as long as the answer it writes.
	total    openaiwire.Usage
	hasTotal bool
	prompt   string

	log      *slog.Logger // nil: no debug lines
	mayDebug bool         // the caller may have the prompt back
}

var errBadAnswer = pipeline.ServerError(http.StatusBadGateway, "bad_upstream_response",
	"The upstream's answer to the completion the gateway made of this chat request could not be read as a completion.")

func (b *backend) Generate(ctx context.Context, g granite.GenerateRequest) ([]granite.Generation, error) {
	out, err := b.request(g, nil)
	if err != nil {
		return nil, err
	}
	res, err := b.next(ctx, out)
	if err != nil {
		return nil, &upstreamAnswer{err: err}
	}
	if res.StatusCode != http.StatusOK || res.Stream {
		return nil, &upstreamAnswer{res: res}
	}
	gens, err := b.take(res)
	if err == nil && b.log != nil && b.log.Enabled(ctx, slog.LevelDebug) {
		for i, g := range gens {
			b.log.DebugContext(ctx, "granite: raw output", "model", string(b.model), "request_id", b.req.ID, "choice", i,
				"output", httpapi.Truncate(g.Text, MaxDebugPrompt))
		}
	}
	return gens, err
}

// request is the /v1/completions request for g: whole, or streamed with the client's
// stream_options when streamOptions is not nil.
func (b *backend) request(g granite.GenerateRequest, streamOptions json.RawMessage) (*pipeline.Request, error) {
	so := streamOptions
	if len(so) == 0 || string(so) == "null" {
		so = nil
	}
	raw, err := appendCompletionRequest(make([]byte, 0, len(g.Prompt)+len(g.Prompt)/8+256), b.model, g.Prompt, streamOptions != nil, so, g.Params)
	if err != nil {
		return nil, err
	}
	out := *b.req
	out.Path = completionPath
	out.PromptTokens = nil // counted for the chat render, not this prompt
	if err := out.SetBody(raw); err != nil {
		return nil, err
	}
	b.prompt = g.Prompt
	if b.log != nil && b.log.Enabled(context.Background(), slog.LevelDebug) {
		b.log.Debug("granite: prompt", "model", string(b.model), "request_id", b.req.ID, "prompt", httpapi.Truncate(g.Prompt, MaxDebugPrompt))
	}
	return &out, nil
}

// take reads a whole completion answer.
func (b *backend) take(res *pipeline.Response) ([]granite.Generation, error) {
	buf := b.bufs.get()
	defer b.bufs.put(buf)
	data, err := readAll(res.Body, (*buf)[:0], b.max)
	*buf = data
	if err != nil {
		res.Body.Finish(nil)
		if err == errTooLarge {
			return nil, pipeline.ServerError(http.StatusBadGateway, "upstream_response_too_large",
				fmt.Sprintf("The upstream's answer is over %d bytes.", b.max))
		}
		return nil, pipeline.ServerError(http.StatusBadGateway, "upstream_failed", "Reading the upstream's answer failed: "+err.Error())
	}
	u := res.Body.Finish(nil)
	var c openaiwire.Completion
	if openaiwire.DecodeCompletionText(data, &c) != nil {
		return nil, errBadAnswer // b.got stays the last answer read
	}
	b.last, b.got = res, c
	b.usage.PromptTokens += u.PromptTokens
	b.usage.CompletionTokens += u.CompletionTokens
	b.usage.Chunks += u.Chunks
	b.usage.Status = u.Status
	if c.Usage != nil {
		b.hasTotal = true
		b.total.PromptTokens += c.Usage.PromptTokens
		b.total.CompletionTokens += c.Usage.CompletionTokens
		b.total.TotalTokens += c.Usage.TotalTokens
	}
	gens := make([]granite.Generation, len(c.Choices))
	for i, ch := range c.Choices {
		gens[i] = granite.Generation{Text: ch.Text}
		if ch.FinishReason != nil {
			gens[i].StopReason = *ch.FinishReason
		}
	}
	return gens, nil
}

// answer is the chat completion (or its replayed stream) for the parsed results.
func (b *backend) answer(req *pipeline.Request, f map[string]json.RawMessage, o *Options, results []granite.Result) (*pipeline.Response, error) {
	if b.last == nil { // an IO processor that answered without the upstream
		b.last = &pipeline.Response{}
	}
	model := b.got.Model
	if model == "" {
		_ = json.Unmarshal(b.model, &model)
	}
	out := openaiwire.ChatCompletion{Header: openaiwire.Header{ID: o.NewID(), Object: "chat.completion", Created: o.Now().Unix(),
		Model: model, SystemFingerprint: b.got.SystemFingerprint}, Choices: make([]openaiwire.ChatChoice, len(results))}
	if b.hasTotal {
		out.Usage = &b.total
	}
	// Granite's members of each message are written first, into a pooled buffer, and the writer
	// copies them (Message.Extra): one buffer for every choice, reused from answer to answer.
	// A slice of it stays right as it grows (append leaves the old array as it was).
	extra := b.bufs.get()
	defer b.bufs.put(extra)
	header := http.Header{}
	for i := range results {
		m := &results[i].NextMessage
		cm := openaiwire.Message{Role: "assistant", ReasoningContent: m.ReasoningContent}
		for j, tc := range m.ToolCalls {
			args := string(tc.Arguments)
			if args == "" {
				args = "{}"
			}
			id := tc.ID
			if id == "" {
				id = fmt.Sprintf("call_%d_%d", i, j)
			}
			cm.ToolCalls = append(cm.ToolCalls, openaiwire.ToolCall{ID: id, Type: "function",
				Function: openaiwire.Function{Name: tc.Name, Arguments: args}})
		}
		// Granite's finish reason is always a string (the writer's pointer only tells null
		// apart): the parse's own when it has one, so that the common answer allocates none.
		finish := &m.StopReason
		switch {
		case len(cm.ToolCalls) > 0:
			s := "tool_calls"
			finish = &s
		case *finish == "":
			s := "stop"
			finish = &s
		}
		if content := m.Content; content != "" || len(cm.ToolCalls) == 0 {
			cm.Content = &content
		}
		if m.ParseError != "" {
			header.Add(ParseErrorHeader, fmt.Sprintf("choice %d: %s", i, httpapi.Truncate(sanitizeHeader(m.ParseError), 512)))
		}
		// parse_error says why the model's output could not be parsed (the part it could not
		// read is then in the content, as written), whole; ParseErrorHeader has it shortened.
		at := len(*extra)
		*extra = appendExtras(*extra, m.Citations, m.Documents, m.Hallucinations, m.ParseError)
		cm.Extra = (*extra)[at:]
		out.Choices[i] = openaiwire.ChatChoice{Index: i, Message: cm, FinishReason: finish}
	}
	b.debug(header)
	// The fingerprint goes last, after usage, as the stage's answers have always had it.
	full := out.AppendJSON(make([]byte, 0, answerSize(results)), openaiwire.Options{FingerprintLast: true})
	res := &pipeline.Response{StatusCode: http.StatusOK, GatewayHeader: b.last.GatewayHeader, Endpoint: b.last.Endpoint,
		Model: b.last.Model, BackendType: b.last.BackendType, Header: header}
	if !req.Stream() {
		header["Content-Type"] = []string{"application/json"} // canonical already
		// With its length the client is sent one body, not chunks (net/http measures only
		// bodies under 2 KB itself).
		header["Content-Length"] = []string{strconv.Itoa(len(full))}
		res.Body = pipeline.NewBody(full, b.usage)
		return res, nil
	}
	chunks, err := chatstream.Replay(chatPath, full, chatstream.ReplayOptions{ID: out.ID, Created: out.Created,
		IncludeUsage: openaiwire.IncludeUsage(f["stream_options"])})
	if err != nil {
		return nil, fmt.Errorf("granitestage: replaying the answer: %w", err)
	}
	if err := addExtras(chunks, results); err != nil {
		return nil, err
	}
	header.Set("Content-Type", "text/event-stream")
	header.Set("Cache-Control", "no-cache")
	res.Stream = true
	res.Body = pipeline.NewEventBody(chunks, b.usage)
	return res, nil
}

// debug sets PromptHeader when the request asked for it.
func (b *backend) debug(header http.Header) {
	if b.mayDebug && b.req.Header != nil && b.req.Header.Get(DebugHeader) == "prompt" {
		p := b.prompt
		if len(p) > MaxDebugPrompt {
			p = p[:MaxDebugPrompt]
			header.Set(PromptHeader+"-Truncated", strconv.Itoa(len(b.prompt)))
		}
		header.Set(PromptHeader, base64.StdEncoding.EncodeToString([]byte(p)))
	}
}

// sanitizeHeader keeps a header value to printable ASCII.
func sanitizeHeader(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = ' '
		}
	}
	return string(b)
}

// extras are Granite's members of a message, as a stream's finish chunk carries them in its delta.
type extras struct {
	Citations      []granite.Citation      `json:"citations,omitempty"`
	Documents      []granite.CitedDocument `json:"documents,omitempty"`
	Hallucinations []granite.Hallucination `json:"hallucinations,omitempty"`
}

// addExtras puts each choice's Granite extras into the delta of its finish chunk (Replay carries
// only OpenAI's members).
func addExtras(chunks [][]byte, results []granite.Result) error {
	for i, c := range chunks {
		var head struct {
			Choices []struct {
				Index        int     `json:"index"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if json.Unmarshal(c, &head) != nil || len(head.Choices) != 1 || head.Choices[0].FinishReason == nil {
			continue
		}
		idx := head.Choices[0].Index
		if idx < 0 || idx >= len(results) {
			continue
		}
		m := &results[idx].NextMessage
		if m.Citations == nil && m.Documents == nil && m.Hallucinations == nil {
			continue
		}
		var chunk map[string]json.RawMessage
		var chs []map[string]json.RawMessage
		if json.Unmarshal(c, &chunk) != nil || json.Unmarshal(chunk["choices"], &chs) != nil {
			continue
		}
		delta, err := json.Marshal(extras{Citations: m.Citations, Documents: m.Documents, Hallucinations: m.Hallucinations})
		if err != nil {
			return fmt.Errorf("granitestage: %w", err)
		}
		chs[0]["delta"] = delta
		if chunk["choices"], err = json.Marshal(chs); err != nil {
			return fmt.Errorf("granitestage: %w", err)
		}
		if chunks[i], err = json.Marshal(chunk); err != nil {
			return fmt.Errorf("granitestage: %w", err)
		}
	}
	return nil
}

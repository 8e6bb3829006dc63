// Package pipeline is the shape every LLM request takes between the surface that received it and
// the upstream that answers it, in the style of connect-go's interceptors:
//
//	surface (OpenAI HTTP, OpenAI Connect/gRPC, KServe bridge, batch line)
//	   -> Request -> [guard] -> [model's interceptors] -> terminal Handler (the metered upstream exchange)
//	   <- Response (status, headers, a body read as it arrives: bytes or SSE events)
//
// A Handler answers a Request; an Interceptor wraps a Handler. Every surface builds a Request from
// its own wire format and calls one Handler, so a stage written once (a cache, a chat template, a
// session window, a router) applies to all of them.
//
// A Request is an OpenAI API request body (chat completion, completion, embedding): every surface
// speaks it, or converts to it. Only its routing fields are read up front (model, stream, the
// completion length), by a scanner that skips everything else without decoding it; the full body
// is parsed only when a stage asks for it (Wire, Edit), once, into a view every later stage reads
// and edits; an edited body is encoded once, when it goes upstream (Body). A model without
// interceptors keeps the zero-parse byte-forwarding path.
package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/internal/jsonwire"
	"github.com/infergate/infergate/lib/openaiwire"
)

// Handler answers one request. It returns a Response (whose body the caller reads and finishes)
// or an error: an *Error is the gateway's own answer (its status and OpenAI error object); a
// context's error means the caller went away; anything else is an internal failure.
type Handler func(ctx context.Context, req *Request) (*Response, error)

// Interceptor wraps a Handler: it may change the request, answer it itself (never calling next),
// call next once or several times, and change or replace the response.
type Interceptor func(next Handler) Handler

// Chain wraps h in the interceptors, the first outermost: Chain(h, a, b) runs a, then b, then h.
func Chain(h Handler, interceptors ...Interceptor) Handler {
	for i := len(interceptors) - 1; i >= 0; i-- {
		h = interceptors[i](h)
	}
	return h
}

// Request is one LLM request on its way to an upstream.
type Request struct {
	// Path is the OpenAI API path the body is for: /v1/chat/completions, /v1/completions,
	// /v1/embeddings.
	Path string
	// RawQuery is the client's query string, passed upstream as sent; empty for internal calls.
	RawQuery string
	// Header holds the client's headers, passed upstream minus hop-by-hop ones and those the
	// gateway consumed. A call through another surface (OpenAIService over gRPC or Connect, the
	// KServe bridge over gRPC, Connect or REST) has only its gateway headers here (GatewayHeader,
	// and Content-Type), nil when it sent none; batch lines nil.
	Header http.Header
	// RemoteAddr is the client's address, for X-Forwarded-For; empty for internal calls.
	RemoteAddr string
	// ID is the request id, sent upstream as X-Request-Id.
	ID string
	// Start is when the gateway received the request: latency is measured from it.
	Start time.Time
	// PromptTokens are the prompt's token ids once a stage has counted them with the model's
	// tokenizer (a chat request's rendered conversation, or a completion request's one prompt);
	// nil until then. Later stages reuse them rather than tokenize again: the usage the gateway
	// fills in, an upstream that takes token ids, routing on prefix caches.
	PromptTokens []int

	// body is the body as it goes upstream; nil while wire holds edits not encoded yet, and for
	// a form.
	body   []byte
	form   *formBody // a form request's body (NewFormRequest, NewStreamedFormRequest); nil for JSON
	scan   Routing
	fields map[string]json.RawMessage // Fields' result, until the body changes
	// wire is the parsed view of the body, made on the first Wire, Edit, Fields or EditBody and
	// kept until SetBody. Edit replaces it with an edited clone and never changes it in place,
	// so a struct copy of the request (out := *req) shares it safely: an edit of either copy
	// leaves the other's view as it was.
	wire *openaiwire.Body
}

// NewFormRequest is a request whose body is a multipart form rather than JSON (vLLM's audio
// routes), held in form (which may be partly on disk: the request reads it, never changes it;
// its caller closes it once the answer is done), routed on the form's model field, whose value
// is the form's bytes [start, end) (start < 0: not known, and the form goes to every endpoint as
// it is). It has no parsed view (Wire fails, Has is false) and Body is nil: the stages that read
// bodies act on the JSON routes only, and the upstream client sends FormBody.
func NewFormRequest(path string, form *httpapi.Spool, model string, start, end int, stream bool) *Request {
	return &Request{Path: path, form: &formBody{spool: form},
		scan: Routing{Model: model, Stream: stream, MaxTokens: -1, ModelStart: start, ModelEnd: end}}
}

// NewStreamedFormRequest is a form request whose body goes upstream as the client sends it: head,
// the form's first bytes (held in memory, and holding the model field's value at [start, end)),
// then rest, read once, by the one attempt that takes it. size is the whole form's length, -1
// when the client did not say. Unlike a spooled form, it can be sent to a second endpoint only
// while no attempt has read from it (FormBody); the error of reading rest is FormErr's.
func NewStreamedFormRequest(path string, head []byte, rest io.Reader, size int64, model string, start, end int, stream bool) *Request {
	return &Request{Path: path, form: &formBody{head: head, rest: rest, size: size},
		scan: Routing{Model: model, Stream: stream, MaxTokens: -1, ModelStart: start, ModelEnd: end}}
}

// formBody is a form request's body: spooled (read as often as needed) or streamed (head, then
// rest, read once).
type formBody struct {
	spool *httpapi.Spool

	head []byte
	rest io.Reader
	size int64
	// mu guards what follows: which reader may read (gen), whether one has (started), and the
	// error reading rest.
	mu      sync.Mutex
	gen     int
	started bool
	err     error
}

// streamReader is one attempt's reader of a streamed form: it reads while it is the newest one
// handed out; an older one (an attempt given up before it read, whose transport may still try)
// reads nothing.
type streamReader struct {
	f   *formBody
	gen int
	r   io.Reader // head's parts, the name, then rest
}

// errFormResent is what a superseded streamReader reads.
var errFormResent = errors.New("the form went to another endpoint")

func (s *streamReader) Read(p []byte) (int, error) {
	f := s.f
	f.mu.Lock()
	if s.gen != f.gen {
		f.mu.Unlock()
		return 0, errFormResent
	}
	f.started = true
	f.mu.Unlock()
	n, err := s.r.Read(p)
	return n, err
}

// restReader reads a streamed form's rest, keeping its first error other than EOF.
type restReader struct{ f *formBody }

func (r restReader) Read(p []byte) (int, error) {
	n, err := r.f.rest.Read(p)
	if err != nil && err != io.EOF {
		r.f.mu.Lock()
		if r.f.err == nil {
			r.f.err = err
		}
		r.f.mu.Unlock()
	}
	return n, err
}

// GatewayHeader reports whether name, in any case (a canonical HTTP header, or grpc-go's lower-case
// metadata key), is one of the gateway's own headers: X-Infergate-*. Over HTTP the stages read a
// request's (X-Infergate-Session-Id, X-Infergate-Debug) from Request.Header; the other surfaces
// carry these, and only these, into it so that the stages apply them alike.
func GatewayHeader(name string) bool {
	const prefix = "X-Infergate-"
	return len(name) > len(prefix) && strings.EqualFold(name[:len(prefix)], prefix)
}

// Routing is what the gateway reads from a request body without decoding it: the two fields it
// routes on, and the completion length the guard's token estimate needs.
type Routing struct {
	Model  string
	Stream bool
	// MaxTokens is the top-level max_completion_tokens, else max_tokens, when it is a
	// non-negative integer; -1 otherwise.
	MaxTokens int
	// ModelStart and ModelEnd delimit the model's JSON string in Body's bytes, quotes included,
	// so a model name can be replaced in place without re-encoding the body.
	ModelStart, ModelEnd int
}

// NewRequest reads body's routing fields and returns a request for path. The error is an *Error
// for the client (a 400: malformed JSON, or no model).
func NewRequest(path string, body []byte) (*Request, error) {
	r := &Request{Path: path}
	if err := r.SetBody(body); err != nil {
		return nil, err
	}
	return r, nil
}

// Body is the request body as it goes upstream. The caller must not modify it. After an Edit
// it is the edited view, encoded on the first call and kept.
func (r *Request) Body() []byte {
	if r.body == nil && r.wire != nil {
		r.body = r.wire.AppendJSON(make([]byte, 0, r.wire.Len()))
	}
	return r.body
}

// BodyLen is len(Body()), without encoding an edited body: for a stage that sizes the request
// (a token estimate) between another's edit and the upstream call.
func (r *Request) BodyLen() int {
	if f := r.form; f != nil {
		if f.spool != nil {
			return int(f.spool.Size())
		}
		return int(max(f.size, int64(len(f.head)))) // a streamed form's length, as far as known
	}
	if r.body == nil && r.wire != nil {
		return r.wire.Len()
	}
	return len(r.body)
}

// Routing is what the gateway routes the request on.
func (r *Request) Routing() Routing { return r.scan }

// Model is the model the request names.
func (r *Request) Model() string { return r.scan.Model }

// Stream reports whether the request asks for a server-sent-events stream.
func (r *Request) Stream() bool { return r.scan.Stream }

// SetBody replaces the body (a stage that rewrote the request) and reads its routing fields
// again; on error the request is unchanged. The body must name a model. The parsed view, if
// any, is dropped: the next Wire parses the new body.
func (r *Request) SetBody(body []byte) error { return r.setBody(body, nil) }

// setBody is SetBody keeping wire as the body's view: nil, or the view body was encoded from.
func (r *Request) setBody(body []byte, wire *openaiwire.Body) error {
	rt, err := scanRouting(body)
	if err != nil {
		return InvalidJSON(err)
	}
	if rt.Model == "" {
		return MissingModel()
	}
	r.body, r.scan, r.fields, r.wire = body, rt, nil, wire
	return nil
}

// Wire is the parsed view of the body: made on the first call (the one parse of the body past
// its routing scan) and returned by later ones until SetBody. It is for reading (it is frozen:
// Set and Drop on it panic): a stage changes the request through Edit, which edits a clone and
// so keeps a struct copy of the request independent. The
// error is an *Error for the client (not reached for a body NewRequest accepted).
func (r *Request) Wire() (*openaiwire.Body, error) {
	w, err := r.view()
	if err != nil {
		return nil, InvalidJSON(err)
	}
	return w, nil
}

// Has reports whether the body has the top-level member name: a stage's test before it reads or
// edits one. A body no stage has edited is first searched for the name's bytes, quoted, and is
// parsed only if they are there, so a request without the member costs no parse (and, as the
// byte search always did, it misses a name spelled with escapes); an edited body, whose names
// are written as json.Marshal writes them, is asked through its view without an encode.
func (r *Request) Has(name string) (bool, error) {
	if r.form != nil || r.body != nil && !r.mentions(name) {
		return false, nil
	}
	w, err := r.Wire()
	if err != nil {
		return false, err
	}
	return w.Has(name), nil
}

// mentions reports whether the body's bytes hold name as a JSON string with no escape.
func (r *Request) mentions(name string) bool {
	var buf [64]byte
	return bytes.Contains(r.body, append(append(append(buf[:0], '"'), name...), '"'))
}

// view is Wire with the parser's error.
func (r *Request) view() (*openaiwire.Body, error) {
	if r.form != nil {
		return nil, errors.New("the request body is a multipart form, not JSON")
	}
	if r.wire == nil {
		w, err := openaiwire.Parse(r.body)
		if err != nil {
			return nil, fmt.Errorf("decoding the request body: %w", err)
		}
		w.Freeze() // shared with the request's copies: edits go through Edit, on a clone
		r.wire = w
	}
	return r.wire, nil
}

// Edit changes the body through its view: fn edits a clone of it (Set, Drop), which replaces
// the view if fn returns nil; on an error, fn's or the check's, the request is unchanged.
//
// The edited body is encoded once, when Body is next called, in the sorted layout of EditBody
// (an Edit that sets or drops nothing changes nothing). An edit of model, stream, max_tokens or
// max_completion_tokens, or one that sets a value that is not JSON or has white space around
// it, is encoded and checked at once, as SetBody checks a body, so that its *Error
// (InvalidJSON, MissingModel) comes from the stage that made it and Routing reads the new
// values.
func (r *Request) Edit(fn func(*openaiwire.Body) error) error {
	w, err := r.Wire()
	if err != nil {
		return err
	}
	nb := w.Clone()
	if err := fn(nb); err != nil {
		return err
	}
	nb.Freeze()
	edited, check, padded := false, false, false
	for name := range nb.EditedSince(w) {
		edited = true
		v, ok := nb.Get(name)
		switch {
		case name == "model" || name == "stream" || name == "max_tokens" || name == "max_completion_tokens":
			check = true
		case ok && !jsonwire.Valid(v):
			check = true
		}
		// A value with white space around it is written with it, but a body read again (as
		// SetBody's was, by the next stage) has it trimmed: keep that by reading it again.
		if ok && len(v) > 0 && (isSpace(v[0]) || isSpace(v[len(v)-1])) {
			check, padded = true, true
		}
	}
	switch {
	case !edited:
		return nil
	case padded:
		return r.setBody(nb.AppendJSON(make([]byte, 0, nb.Len())), nil)
	case check:
		return r.setBody(nb.AppendJSON(make([]byte, 0, nb.Len())), nb)
	}
	// The routing members are as they were, and every value is JSON: the scan of the encoded
	// body would read what it read before, bar where the model's string lands.
	r.scan.ModelStart, r.scan.ModelEnd, _ = nb.ValueSpan("model")
	r.body, r.fields, r.wire = nil, nil, nb
	return nil
}

// isSpace reports JSON's white space.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Clone is a copy of the request for one leg of several (a prefill and a decode): an Edit of
// either leaves the other as it was. Header and PromptTokens are shared, as a struct copy
// shares them: a stage that changes them replaces them.
func (r *Request) Clone() *Request {
	c := *r
	c.fields = nil // Fields' map is its caller's to change: the clone builds its own
	return &c
}

// Fields is the body's top-level members as a map, built from the view once: later calls
// return the same map until the body changes. The map and its values are the request's: a stage
// that changes the request edits it (Edit). The values are the body's bytes, not copies.
func (r *Request) Fields() (map[string]json.RawMessage, error) {
	if r.fields != nil {
		return r.fields, nil
	}
	w, err := r.view()
	if err != nil {
		return nil, err
	}
	m := make(map[string]json.RawMessage)
	for name, v := range w.All() {
		m[name] = v
	}
	r.fields = m
	return m, nil
}

// EditBody returns the body with set's members set (added or replaced) and the members named in
// drop removed; every other member keeps its bytes. Members come out sorted by name, compact
// between them. The request is unchanged: a stage passes the result to SetBody (of the
// request, or of a copy for one leg of several). Edit does the same without the copies.
func (r *Request) EditBody(set map[string]json.RawMessage, drop ...string) ([]byte, error) {
	w, err := r.view()
	if err != nil {
		return nil, InvalidJSON(err)
	}
	nb := w.Clone()
	for k, v := range set {
		nb.Set(k, v)
	}
	nb.Drop(drop...) // after the sets: drop wins
	return nb.AppendSorted(make([]byte, 0, nb.Len()+64)), nil
}

// BodyWithModel is the body with the model's name replaced by name and every other byte as it
// was (a copy: the request's own body is kept, for a retry on an endpoint that names the model
// otherwise). A form's is FormBody.
func (r *Request) BodyWithModel(name string) []byte {
	body := r.Body()
	q, _ := json.Marshal(name)
	out := make([]byte, 0, len(body)-(r.scan.ModelEnd-r.scan.ModelStart)+len(q))
	out = append(out, body[:r.scan.ModelStart]...)
	out = append(out, q...)
	return append(out, body[r.scan.ModelEnd:]...)
}

// IsForm reports whether r is a form request (NewFormRequest, NewStreamedFormRequest).
func (r *Request) IsForm() bool { return r.form != nil }

// FormBody is a form request's body as it goes to an endpoint that names the model name: a
// reader of it from its first byte, and its length (-1: not known). Every byte but the model
// field's value is as the client sent it (all of them when the value's place is not known). Each
// call is a new reader, for each attempt; a streamed form's only while no attempt has read from
// it (ok false otherwise: it cannot be sent again), and a new one leaves the older ones empty.
func (r *Request) FormBody(name string) (_ io.Reader, _ int64, ok bool) {
	f := r.form
	start, end := int64(r.scan.ModelStart), int64(r.scan.ModelEnd)
	if sp := f.spool; sp != nil {
		if name == r.scan.Model || start < 0 {
			return sp.Section(0, sp.Size()), sp.Size(), true
		}
		return io.MultiReader(sp.Section(0, start), strings.NewReader(name), sp.Section(end, sp.Size()-end)),
			sp.Size() - (end - start) + int64(len(name)), true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started {
		return nil, 0, false
	}
	f.gen++
	var rd io.Reader
	size := f.size
	if name == r.scan.Model || start < 0 {
		rd = io.MultiReader(bytes.NewReader(f.head), restReader{f})
	} else {
		rd = io.MultiReader(bytes.NewReader(f.head[:start]), strings.NewReader(name), bytes.NewReader(f.head[end:]), restReader{f})
		if size >= 0 {
			size += int64(len(name)) - (end - start)
		}
	}
	return &streamReader{f: f, gen: f.gen, r: rd}, size, true
}

// FormResendable reports whether a form request's body can be sent again after an attempt read
// it: a spooled form can, a streamed one cannot.
func (r *Request) FormResendable() bool { return r.form != nil && r.form.spool != nil }

// FormSent reports whether a streamed form has been read by an attempt, so that no other
// endpoint can be sent it: its answer, whatever it is, is the request's.
func (r *Request) FormSent() bool {
	f := r.form
	if f == nil || f.spool != nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started
}

// FormErr is the error reading a streamed form from the client (it went away, sent too much, or
// sent what the gateway refuses mid-way), nil while there is none: an attempt that failed for it
// failed for the client's sake, not the endpoint's.
func (r *Request) FormErr() error {
	f := r.form
	if f == nil || f.spool != nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// FormError is the client's answer for a streamed form that could not be read (FormErr's error,
// or the guard's refusal in the form's head): the gateway's refusal as it was, a body past the
// limit a 413, anything else (the client went away, or its form was malformed) a 400.
func FormError(err error) *Error {
	var perr *Error
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &perr):
		return perr
	case errors.As(err, &tooBig):
		return TooLarge(tooBig.Limit)
	}
	return InvalidRequest("", "invalid_form", "The multipart form could not be read: "+err.Error())
}

// Response is an answer to a Request: an upstream's, or one a stage made. The caller reads the
// body (Read, or Events for a stream) and calls Close, or Body.Finish, once it is done: until then
// an upstream's endpoint counts the request as outstanding.
type Response struct {
	StatusCode int
	// Header is the upstream's response header (the caller may take its values).
	Header http.Header
	// GatewayHeader holds headers the gateway's stages add for the client (the guard's
	// X-RateLimit-*), sent ahead of Header's, which win where both name one.
	GatewayHeader http.Header
	// Stream reports a successful server-sent-events response: its body is OpenAI's chunks.
	Stream bool
	// Endpoint names the endpoint that answered, Model the name it knows the model by,
	// BackendType its type (vllm, openai, ...); empty when a stage answered.
	Endpoint, Model, BackendType string
	Body                         Body
}

// Body is a response body.
type Body interface {
	io.Reader
	// Finish ends the body (its later calls do nothing) and returns what the request used.
	// clientErr is the consumer's failure to pass the body on (its client went away); nil when
	// it read to the end, or stopped early on purpose.
	Finish(clientErr error) Usage
	// Err is the upstream's failure that stopped the body short: nil when it ended, or when
	// reading stopped because the caller's context ended.
	Err() error
}

// Read reads the body.
func (r *Response) Read(b []byte) (int, error) { return r.Body.Read(b) }

// Close finishes the body; closing before its end cancels the rest of it.
func (r *Response) Close() error {
	r.Body.Finish(nil)
	return nil
}

// UpstreamFailed reports whether reading stopped because the upstream failed mid-body, rather
// than at the body's end or because the caller's context ended.
func (r *Response) UpstreamFailed() bool { return r.Body.Err() != nil }

// Usage is what a request used, as far as the gateway knows.
type Usage struct {
	// PromptTokens and CompletionTokens are the upstream's usage object's, when it sent one.
	PromptTokens, CompletionTokens int64
	// Chunks, for a stream without a usage object, counts its events: about one per generated
	// token (PromptTokens and CompletionTokens are then 0).
	Chunks int64
	// Status is the upstream's HTTP status; 0 when the request never reached one (no healthy
	// endpoint, every one failing), so it used nothing.
	Status int
	// Cached reports an answer the gateway served from its response cache (Status 200): the
	// request counts as one, but no upstream generated a token for it.
	Cached bool
}

type requestIDKey struct{}

// WithRequestID returns a context whose requests carry id as their X-Request-Id, for surfaces
// that take the id from their own protocol (gRPC metadata, a batch line).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the id WithRequestID put in ctx, else a fresh one.
func RequestID(ctx context.Context) string {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok && id != "" {
		return id
	}
	return NewRequestID()
}

// NewRequestID returns a fresh request id: 128 random bits as 32 hex digits. They come from
// math/rand/v2's generator (ChaCha8, seeded by the runtime from the system's entropy): an id
// names a request and guards nothing, and this takes half of crypto/rand's time (45 against
// 85 ns in a loop), on every proxied request.
func NewRequestID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	var s [32]byte
	hex.Encode(s[:], b[:])
	return string(s[:])
}

// ForAll is a Stages function (model name -> its interceptors) that gives every model the same
// interceptors.
func ForAll(interceptors ...Interceptor) func(model string) []Interceptor {
	return func(string) []Interceptor { return interceptors }
}

// Scan reads the routing fields of an OpenAI API request body without decoding anything else,
// rejecting malformed JSON, as NewRequest does; unlike NewRequest it accepts a body without a
// model (Model is then empty), for callers with their own wording of that error.
func Scan(body []byte) (Routing, error) { return scanRouting(body) }

package responses

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/lib/openaiwire"
	"github.com/infergate/infergate/store/responsestate"
	"github.com/infergate/infergate/upstream"
)

// turn is one POST /v1/responses being served: what both serving modes need.
type turn struct {
	r       *http.Request
	reqID   string
	body    []byte
	view    *openaiwire.Body
	model   string
	owner   string
	id      string // the response's id, minted here
	store   bool
	prevID  string
	context []json.RawMessage // the conversation before this turn (previous_response_id's)
	start   time.Time
	// A background turn's run: its id is the one minted here, whatever an upstream's answer
	// says, and only the run stores it (noSave for the serving paths).
	background, noSave bool
}

// readView reads what every way of serving needs of the parsed body: model,
// previous_response_id, and store (true unless false, as OpenAI's default).
func (t *turn) readView() {
	t.model = stringMember(t.view, "model")
	t.prevID = stringMember(t.view, "previous_response_id")
	v, ok := t.view.Get("store")
	t.store = !ok || string(v) != "false"
}

// translated is the turn as a chat completions body over its conversation (t.context), and its
// Response's meta with the turn's id and time.
func (t *turn) translated() ([]byte, openaiwire.ResponsesMeta, error) {
	prev := make([]openaiwire.Raw, len(t.context))
	for i, c := range t.context {
		prev[i] = openaiwire.Raw(c)
	}
	chat, meta, err := openaiwire.ResponsesToChat(t.body, prev)
	meta.ID, meta.CreatedAt = t.id, t.start.Unix()
	return chat, meta, err
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, reqID string) {
	t := &turn{r: r, reqID: reqID, start: h.opts.Now(), id: newResponseID()}
	body, err := httpapi.ReadBody(r, h.opts.MaxBodyBytes)
	if err != nil {
		var tb *http.MaxBytesError
		if errors.As(err, &tb) {
			h.refuse(w, tooLarge(tb.Limit))
			return
		}
		h.refuse(w, &openaiwire.ResponsesError{Message: "Could not read the request body: " + err.Error(), Type: "invalid_request_error"})
		return
	}
	t.body = body
	if t.view, err = openaiwire.Parse(body); err != nil {
		h.refuse(w, &openaiwire.ResponsesError{Message: "We could not parse the JSON body of your request: " + err.Error() +
			". The body must be a JSON object.", Type: "invalid_request_error"})
		return
	}
	t.readView()
	t.owner = h.opts.Owner(r.Context())
	if err := h.loadContext(r.Context(), t); err != nil {
		h.refuse(w, err)
		return
	}
	if v, ok := t.view.Get("background"); ok && string(v) == "true" {
		h.startBackground(w, t)
		return
	}
	h.serve(w, t)
}

// serve answers the turn: passed to the upstreams' /v1/responses, or translated.
func (h *Handler) serve(w http.ResponseWriter, t *turn) {
	if h.opts.Mode != nil && t.model != "" {
		if ctx, ok := h.nativeScope(t.r.Context(), t.model); ok && !h.native(w, t, ctx) {
			return
		}
	}
	h.translate(w, t)
}

func (h *Handler) refuse(w http.ResponseWriter, err error) {
	writeError(w, err)
	h.m.requests.WithLabelValues("create", "refused").Inc()
}

// save stores the turn's response when the client asked for it (store, the default), before the
// client sees its end. A store that fails is logged and counted: the answer still goes out.
func (h *Handler) save(ctx context.Context, t *turn, response []byte) {
	if !t.store || t.noSave {
		return
	}
	_ = h.put(ctx, t, response)
}

// put stores the turn's response, whatever the turn asked; the error is logged and counted.
func (h *Handler) put(ctx context.Context, t *turn, response []byte) error {
	input, err := inputItems(t.body, t.id)
	if err != nil {
		h.log.Warn("responses: reading the input items to store failed", "id", t.id, "err", err)
		h.m.storeErrors.Inc()
		return err
	}
	rec := &responsestate.Record{ID: t.id, Owner: t.owner, Model: t.model, CreatedAt: t.start,
		Response: append(json.RawMessage(nil), response...), Input: input, Context: t.context}
	// The answer is owed to the client even when its context ended with the last byte.
	if err := h.store.Put(context.WithoutCancel(ctx), rec); err != nil {
		h.log.Warn("responses: storing the response failed", "id", t.id, "bytes", rec.Size(), "err", err)
		h.m.storeErrors.Inc()
		return err
	}
	return nil
}

// translate serves the turn through the gateway's chat completions handler.
func (h *Handler) translate(w http.ResponseWriter, t *turn) {
	auto := stringMember(t.view, "truncation") == "auto"
	drop := 1 // turns to leave out at the next context-length refusal
	for {
		chat, meta, err := t.translated()
		if err != nil {
			h.refuse(w, err)
			return
		}
		tw := &translateWriter{relay: newRelay(w), t: t, meta: meta, hd: h}
		aborted := httpapi.ServeInProcess(h.opts.Chat, tw, chatRequest(t.r, chat, t.reqID))
		if auto && !aborted && !tw.sent && len(t.context) > 0 && contextExceeded(tw.status, tw.buf) {
			// truncation auto: the oldest turns go, twice as many at each refusal, so that a
			// long conversation takes a few tries, and none goes that another would have fit.
			t.context = dropTurns(t.context, drop)
			drop *= 2
			h.m.truncations.Inc()
			continue
		}
		if aborted && !tw.sent && t.r.Context().Err() != nil {
			// The client went away before any answer: end unanswered (see the chat handler).
			h.m.requests.WithLabelValues("create", "canceled").Inc()
			panic(http.ErrAbortHandler)
		}
		tw.finish(aborted)
		h.m.requests.WithLabelValues("create", tw.outcome).Inc()
		h.m.observe("translate", tw.outcome, meta.Stream, t.start, h.opts.Now())
		if aborted && tw.sent {
			panic(http.ErrAbortHandler)
		}
		return
	}
}

// contextExceeded reports whether an error answer says the request is over the model's context:
// the gateway's own check's code, or vLLM's words.
func contextExceeded(status int, body []byte) bool {
	if status != http.StatusBadRequest {
		return false
	}
	obj, _ := httpapi.ParseBody(status, body)
	return obj.Code == "context_length_exceeded" || strings.Contains(obj.Message, "maximum context length")
}

// dropTurns leaves out the n oldest turns of a conversation's items: a turn starts at a user
// message, so a call and its output go together.
func dropTurns(items []json.RawMessage, n int) []json.RawMessage {
	for i := 1; i < len(items); i++ {
		if isUserMessage(items[i]) {
			if n--; n == 0 {
				return items[i:]
			}
		}
	}
	return nil
}

func isUserMessage(item []byte) bool {
	b, err := openaiwire.Parse(item)
	if err != nil {
		return false
	}
	typ := stringMember(b, "type")
	return (typ == "message" || typ == "") && stringMember(b, "role") == "user"
}

// chatRequest is the in-process request for body at path /v1/chat/completions: the client's
// context (its principal, its cancellation) and headers, less those that describe the body or
// would have the answer compressed.
func chatRequest(r *http.Request, body []byte, reqID string) *http.Request {
	return inProcess(r, "/v1/chat/completions", body, reqID)
}

func inProcess(r *http.Request, path string, body []byte, reqID string) *http.Request {
	out := r.WithContext(r.Context())
	u := *r.URL
	u.Path, u.RawPath, u.RawQuery = path, "", ""
	out.URL = &u
	out.RequestURI = u.RequestURI()
	out.Method = http.MethodPost
	out.Header = r.Header.Clone()
	out.Header.Del("Accept-Encoding") // the answer is read here: it must come uncompressed
	out.Header.Del("Content-Length")
	out.Header.Set("Content-Type", "application/json")
	out.Header.Set(httpapi.HeaderRequestID, reqID)
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.TransferEncoding = nil
	out.GetBody = nil
	return out
}

// nativeScope decides whether a turn for model goes to the upstreams' /v1/responses: for Native
// always, for Auto unless every endpoint serving the model is known to be chat-only, then with
// those endpoints filtered out of the routing.
func (h *Handler) nativeScope(ctx context.Context, model string) (context.Context, bool) {
	switch h.opts.Mode(model) {
	case Native:
		return ctx, true
	case Translate:
		return ctx, false
	}
	eps := h.opts.Endpoints(model)
	if len(eps) == 0 {
		return ctx, false // not served here: the chat path words the 404
	}
	some := false
	for _, e := range eps {
		if !h.chatOnly.has(e) {
			some = true
			break
		}
	}
	if !some {
		return ctx, false
	}
	return upstream.WithFilter(ctx, func(endpoint string) bool { return !h.chatOnly.has(endpoint) }), true
}

// noResponsesRoute reports whether an answer to /v1/responses says the upstream has no such
// route (a 404, 405 or 501 without an OpenAI error object: FastAPI's {"detail":"Not Found"}, or
// plain text), rather than refusing this request (an unknown model or response id), which it
// answers with an error object.
func noResponsesRoute(status int, body []byte) bool {
	if status != http.StatusNotFound && status != http.StatusMethodNotAllowed && status != http.StatusNotImplemented {
		return false
	}
	var shape struct {
		Error  json.RawMessage `json:"error"`
		Object string          `json:"object"`
	}
	if json.Unmarshal(body, &shape) != nil {
		return true
	}
	return len(shape.Error) == 0 && shape.Object != "error"
}

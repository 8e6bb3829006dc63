package responses

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/openaiwire"
	"github.com/infergate/infergate/store/responsestate"
)

// Mode is how a model's Responses requests are served.
type Mode string

// The serving modes (models.<name>.responses).
const (
	// Auto passes a request to the model's upstreams' own /v1/responses and, for an endpoint
	// that answers it with a bare 404 (it has no such route), remembers the endpoint as
	// chat-only and translates for it from then on. The default: "" is Auto too.
	Auto Mode = "auto"
	// Native always passes requests to the upstreams' /v1/responses.
	Native Mode = "native"
	// Translate always serves requests through the gateway's /v1/chat/completions.
	Translate Mode = "translate"
)

// Options configures a Handler.
type Options struct {
	// Chat is the gateway's own POST /v1/chat/completions handler: translated requests are
	// served by it in-process, so every stage of the gateway applies to them. Required.
	Chat http.Handler
	// Mode names each model's serving mode; nil: Translate for every model (no upstream is
	// asked for /v1/responses).
	Mode func(model string) Mode
	// NativeHandler serves a native request at POST /v1/responses: the gateway's upstream
	// proxy. Required when Mode is set.
	NativeHandler http.Handler
	// Endpoints lists the upstream endpoints that serve model (for Auto: whether any of them
	// may still serve /v1/responses). Required when Mode is set.
	Endpoints func(model string) []string
	// Store keeps responses made with store (the default): nil keeps them in the process
	// (responsestate.NewMemory with its defaults).
	Store responsestate.Store
	// Owner is the caller a request belongs to (its API key's name, "" when keys are off):
	// a response is visible only to its owner. Nil: every caller is one.
	Owner func(ctx context.Context) string
	// MaxBodyBytes limits a request body; default 32 MiB.
	MaxBodyBytes int64
	// Metrics, when set, counts requests (NewMetrics; register its Collectors).
	Metrics *Metrics
	// Logger defaults to slog.Default(); Now to time.Now.
	Logger *slog.Logger
	Now    func() time.Time
}

// Handler serves the Responses API: POST /v1/responses, GET and DELETE /v1/responses/{id},
// GET /v1/responses/{id}/input_items and POST /v1/responses/{id}/cancel, matched on the path
// after its last "/v1/responses", so it can be mounted under a prefix without stripping it.
type Handler struct {
	opts     Options
	store    responsestate.Store
	m        *Metrics
	log      *slog.Logger
	chatOnly *chatOnly
	bg       runs // background responses running here
}

// New returns a Handler. It panics without Options.Chat, or with Mode but no NativeHandler or
// Endpoints: wiring mistakes, not run-time conditions.
func New(opts Options) *Handler {
	if opts.Chat == nil {
		panic("responses: Options.Chat is required")
	}
	if opts.Mode != nil && (opts.NativeHandler == nil || opts.Endpoints == nil) {
		panic("responses: Options.Mode needs Options.NativeHandler and Options.Endpoints")
	}
	return newHandler(opts)
}

// newHandler is New without the checks of what only HTTP serving needs.
func newHandler(opts Options) *Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 32 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Owner == nil {
		opts.Owner = func(context.Context) string { return "" }
	}
	st := opts.Store
	if st == nil {
		st = responsestate.NewMemory(responsestate.MemoryOptions{})
	}
	m := opts.Metrics
	if m == nil {
		m = NewMetrics()
	}
	return &Handler{opts: opts, store: st, m: m, log: opts.Logger, chatOnly: newChatOnly(opts.Now)}
}

const apiPath = "/v1/responses"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := strings.LastIndex(r.URL.Path, apiPath)
	if i < 0 {
		writeError(w, notFoundPath(r))
		return
	}
	rest := strings.Trim(r.URL.Path[i+len(apiPath):], "/")
	reqID := r.Header.Get(httpapi.HeaderRequestID)
	if reqID == "" {
		reqID = pipeline.NewRequestID()
	}
	w.Header().Set(httpapi.HeaderRequestID, reqID)
	if rest == "" {
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, http.MethodPost)
			return
		}
		h.create(w, r, reqID)
		return
	}
	id, sub, _ := strings.Cut(rest, "/")
	switch {
	case sub == "" && r.Method == http.MethodGet:
		h.retrieve(w, r, id)
	case sub == "" && r.Method == http.MethodDelete:
		h.delete(w, r, id)
	case sub == "":
		methodNotAllowed(w, r, "GET, DELETE")
	case sub == "input_items" && r.Method == http.MethodGet:
		h.inputItems(w, r, id)
	case sub == "input_items":
		methodNotAllowed(w, r, http.MethodGet)
	case sub == "cancel" && r.Method == http.MethodPost:
		h.cancel(w, r, id)
	case sub == "cancel":
		methodNotAllowed(w, r, http.MethodPost)
	default:
		writeError(w, notFoundPath(r))
	}
}

// get loads the caller's stored response id, answering the error itself (ok false).
func (h *Handler) get(w http.ResponseWriter, r *http.Request, id string) (*responsestate.Record, bool) {
	rec, err := h.store.Get(r.Context(), h.opts.Owner(r.Context()), id)
	switch {
	case err == nil:
		return rec, true
	case errors.Is(err, responsestate.ErrNotFound):
		writeError(w, notFound(id))
	default:
		h.log.Warn("responses: reading the store failed", "id", id, "err", err)
		writeError(w, storeDown(err))
	}
	return nil, false
}

func (h *Handler) retrieve(w http.ResponseWriter, r *http.Request, id string) {
	rec, ok := h.get(w, r, id)
	if !ok {
		h.m.requests.WithLabelValues("retrieve", "error").Inc()
		return
	}
	if r.URL.Query().Get("stream") == "true" || streamInBody(r) {
		h.replay(w, r, rec)
		h.m.requests.WithLabelValues("retrieve", "stream").Inc()
		return
	}
	writeJSON(w, http.StatusOK, rec.Response)
	h.m.requests.WithLabelValues("retrieve", "ok").Inc()
}

// streamInBody reports whether a GET carries {"stream": true} as a JSON body, as openai-go's
// GetStreaming sends it. At most 4 KiB are read: a retrieve has nothing else to say.
func streamInBody(r *http.Request) bool {
	if r.Body == nil || r.ContentLength == 0 {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 4<<10))
	if err != nil {
		return false
	}
	v, err := openaiwire.Parse(b)
	if err != nil {
		return false
	}
	s, ok := v.Get("stream")
	return ok && string(s) == "true"
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request, id string) {
	err := h.store.Delete(r.Context(), h.opts.Owner(r.Context()), id)
	switch {
	case err == nil:
		b := append([]byte(`{"id":`), quote(id)...)
		b = append(b, `,"object":"response.deleted","deleted":true}`...)
		writeJSON(w, http.StatusOK, b)
		h.m.requests.WithLabelValues("delete", "ok").Inc()
		return
	case errors.Is(err, responsestate.ErrNotFound):
		writeError(w, notFound(id))
	default:
		h.log.Warn("responses: deleting from the store failed", "id", id, "err", err)
		writeError(w, storeDown(err))
	}
	h.m.requests.WithLabelValues("delete", "error").Inc()
}

// inputItems lists a stored response's input items as OpenAI's cursor page: limit (1 to 100,
// default 20), order (desc by default, as OpenAI's), after (an item id).
func (h *Handler) inputItems(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	limit := 20
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			writeError(w, &openaiwire.ResponsesError{Message: "limit must be an integer from 1 to 100.", Type: "invalid_request_error", Param: "limit", Code: "invalid_value"})
			return
		}
		limit = n
	}
	order := q.Get("order")
	if order == "" {
		order = "desc"
	}
	if order != "asc" && order != "desc" {
		writeError(w, &openaiwire.ResponsesError{Message: "order must be asc or desc.", Type: "invalid_request_error", Param: "order", Code: "invalid_value"})
		return
	}
	rec, ok := h.get(w, r, id)
	if !ok {
		h.m.requests.WithLabelValues("input_items", "error").Inc()
		return
	}
	page, err := itemPage(rec.Input, order == "desc", q.Get("after"), limit)
	if err != nil {
		writeError(w, err)
		h.m.requests.WithLabelValues("input_items", "error").Inc()
		return
	}
	writeJSON(w, http.StatusOK, page)
	h.m.requests.WithLabelValues("input_items", "ok").Inc()
}

// newResponseID mints resp_ and 48 hex digits, as OpenAI's ids are.
func newResponseID() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "resp_" + hex.EncodeToString(b[:])
}

func writeJSON(w http.ResponseWriter, status int, body []byte) { httpapi.WriteRawJSON(w, status, body) }

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeErrorStatus(w, http.StatusMethodNotAllowed, &openaiwire.ResponsesError{
		Message: fmt.Sprintf("Method %s is not allowed on %s; use %s.", r.Method, r.URL.Path, allow), Type: "invalid_request_error"})
}

package responses

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/lib/openaiwire"
	"github.com/infergate/infergate/store/responsestate"
)

// Background responses (background: true) are answered at once with the stored Response in
// status queued, and run by this replica in a goroutine, through the same serving paths as any
// other, its answer stored when it ends: the client polls GET /v1/responses/{id}. Cancel stops
// the run on the replica that has it, and on another replica marks the stored response
// cancelled, which the run sees within cancelPoll and stops. A replica that dies mid-run leaves
// its responses in_progress until their TTL.

// cancelPoll is how often a background run looks for a cancel made on another replica.
const cancelPoll = 500 * time.Millisecond

// runs are the background responses this replica runs, by id.
type runs struct {
	mu sync.Mutex
	m  map[string]*run
}

type run struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (rs *runs) add(id string, r *run) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[string]*run{}
	}
	rs.m[id] = r
}

func (rs *runs) remove(id string) {
	rs.mu.Lock()
	delete(rs.m, id)
	rs.mu.Unlock()
}

func (rs *runs) get(id string) *run {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.m[id]
}

// startBackground stores the turn queued, answers with it, and runs it.
func (h *Handler) startBackground(w http.ResponseWriter, t *turn) {
	if !t.store {
		h.refuse(w, &openaiwire.ResponsesError{Message: "A background response is stored: store must not be false.",
			Type: "invalid_request_error", Param: "background", Code: "invalid_value"})
		return
	}
	if v, ok := t.view.Get("stream"); ok && string(v) == "true" {
		h.refuse(w, &openaiwire.ResponsesError{Message: "Streaming a background response is not supported by this gateway: poll GET /v1/responses/{id}.",
			Type: "invalid_request_error", Param: "stream", Code: "unsupported_value"})
		return
	}
	meta, err := h.backgroundMeta(t)
	if err != nil {
		h.refuse(w, err)
		return
	}
	queued := openaiwire.EmptyResponse(meta, "queued", "")
	if err := h.put(t.r.Context(), t, queued); err != nil {
		h.refuse(w, storeDown(err))
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.r.Context())) // the caller's principal, not its end
	r := &run{cancel: cancel, done: make(chan struct{})}
	h.bg.add(t.id, r)
	bt := *t
	bt.r, bt.background, bt.noSave = t.r.WithContext(ctx), true, true
	go h.runBackground(ctx, &bt, meta, r)
	writeJSON(w, http.StatusOK, queued)
	h.m.requests.WithLabelValues("create", "queued").Inc()
}

// backgroundMeta is the Response's meta for a background turn: the translation's, which also
// refuses what translation cannot serve before anything is queued; for a model served natively,
// what the request says, the upstream being the judge of the rest.
func (h *Handler) backgroundMeta(t *turn) (openaiwire.ResponsesMeta, error) {
	_, meta, err := t.translated()
	if err != nil {
		if _, native := h.nativeScope(t.r.Context(), t.model); h.opts.Mode == nil || t.model == "" || !native {
			return meta, err
		}
		meta = openaiwire.ResponsesMeta{Model: t.model, Store: true, PreviousResponseID: t.prevID}
	}
	meta.ID, meta.CreatedAt, meta.Background = t.id, t.start.Unix(), true
	return meta, nil
}

// runBackground serves the turn into a held answer and stores how it ended.
func (h *Handler) runBackground(ctx context.Context, t *turn, meta openaiwire.ResponsesMeta, r *run) {
	defer close(r.done)
	defer h.bg.remove(t.id)
	defer r.cancel()
	_ = h.put(ctx, t, openaiwire.EmptyResponse(meta, "in_progress", ""))
	stop := make(chan struct{})
	go h.watchCancel(ctx, t, r.cancel, stop)
	held := &heldAnswer{h: make(http.Header)}
	httpapi.ServeInProcess(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { h.serve(w, t) }), held, t.r)
	close(stop)
	var final []byte
	switch {
	case ctx.Err() != nil || h.cancelledElsewhere(t):
		final = openaiwire.EmptyResponse(meta, "cancelled", "")
	case held.status == http.StatusOK && !held.over:
		final = held.body
	default:
		obj, _ := httpapi.ParseBody(held.status, held.body)
		msg := obj.Message
		if msg == "" {
			msg = "The response failed (HTTP " + http.StatusText(held.status) + ")."
		}
		final = openaiwire.EmptyResponse(meta, "failed", msg)
	}
	_ = h.put(context.WithoutCancel(ctx), t, final)
}

// watchCancel stops a run when its stored response is marked cancelled by another replica.
func (h *Handler) watchCancel(ctx context.Context, t *turn, cancel context.CancelFunc, stop <-chan struct{}) {
	tick := time.NewTicker(cancelPoll)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
			if h.cancelledElsewhere(t) {
				cancel()
				return
			}
		}
	}
}

// cancelledElsewhere reports whether t's stored response says cancelled.
func (h *Handler) cancelledElsewhere(t *turn) bool {
	rec, err := h.store.Get(context.WithoutCancel(t.r.Context()), t.owner, t.id)
	return err == nil && responseStatus(rec.Response) == "cancelled"
}

// cancel cancels a background response that has not ended and answers with it (a response that
// ended is answered as it is); a synchronous one is OpenAI's 400.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, id string) {
	rec, ok := h.get(w, r, id)
	if !ok {
		h.m.requests.WithLabelValues("cancel", "error").Inc()
		return
	}
	b, err := openaiwire.Parse(rec.Response)
	if err != nil || stringOrLiteral(b, "background") != "true" {
		writeError(w, &openaiwire.ResponsesError{Message: "Cannot cancel a synchronous response.", Type: "invalid_request_error"})
		h.m.requests.WithLabelValues("cancel", "error").Inc()
		return
	}
	if st := stringMember(b, "status"); st == "queued" || st == "in_progress" {
		if run := h.bg.get(id); run != nil {
			run.cancel()
			select {
			case <-run.done:
			case <-time.After(5 * time.Second):
			}
		} else {
			// Another replica runs it (or ran it and died): mark it; the run stops at its next look.
			b.Set("status", []byte(`"cancelled"`))
			marked := *rec
			marked.Response = b.AppendJSON(nil)
			if err := h.store.Put(r.Context(), &marked); err != nil && !errors.Is(err, responsestate.ErrTooLarge) {
				writeError(w, storeDown(err))
				h.m.requests.WithLabelValues("cancel", "error").Inc()
				return
			}
		}
		if rec, ok = h.get(w, r, id); !ok {
			return
		}
	}
	writeJSON(w, http.StatusOK, rec.Response)
	h.m.requests.WithLabelValues("cancel", "ok").Inc()
}

// responseStatus is a stored Response's status.
func responseStatus(resp []byte) string {
	b, err := openaiwire.Parse(resp)
	if err != nil {
		return ""
	}
	return stringMember(b, "status")
}

// stringOrLiteral is a member's string value, or its JSON text when it is not a string.
func stringOrLiteral(b *openaiwire.Body, name string) string {
	if s := stringMember(b, name); s != "" {
		return s
	}
	v, _ := b.Get(name)
	return string(v)
}

// heldAnswer holds a background run's answer (bounded).
type heldAnswer struct {
	h      http.Header
	status int
	body   []byte
	over   bool
}

func (a *heldAnswer) Header() http.Header { return a.h }
func (a *heldAnswer) Flush()              {}

func (a *heldAnswer) WriteHeader(status int) {
	if a.status == 0 && status >= 200 {
		a.status = status
	}
}

func (a *heldAnswer) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if len(a.body)+len(p) > maxAnswer {
		a.over = true
		return len(p), nil
	}
	a.body = append(a.body, p...)
	return len(p), nil
}

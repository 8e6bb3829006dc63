package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/chatstream"
	"github.com/infergate/infergate/lib/openaiwire"
)

// Headers the stage reads and answers.
const (
	// HeaderSessionID names the session a request is a turn of (the body's session_id says the
	// same); the answer carries it back. The gateway consumes it: it is not sent upstream.
	HeaderSessionID = "X-Infergate-Session-Id"
	// HeaderTrimmedTokens, on an answer, counts the tokens of history left out of the prompt
	// to fit the model's context window.
	HeaderTrimmedTokens = "X-Infergate-Session-Trimmed-Tokens"
)

// Options configure a Manager.
type Options struct {
	// Store keeps the sessions (required).
	Store Store
	// Models are the models that have sessions, by public name.
	Models map[string]ModelOptions
	// Owner is the identity of the caller a request's context belongs to (its API key's), which
	// scopes sessions; nil, or "", when API keys are off: every caller is one owner.
	Owner func(ctx context.Context) string
	// Visible, when set, decides which models a caller may see: creating a session for another
	// is a 404, as the model does not exist to that caller.
	Visible func(ctx context.Context, model string) bool
	// Prefer, when set, is given a turn's context and the endpoint that served the session's
	// last turn, and returns the context to send the turn with: one that makes the upstream
	// picker prefer that endpoint while it is usable, so its prefix cache is reused.
	Prefer func(ctx context.Context, endpoint string) context.Context
	// LockLease is how long a turn's lock lasts unless renewed; the stage renews it every third
	// of it while the turn runs, so a gateway that dies mid-turn frees its session within a
	// lease. Default 30 s.
	LockLease time.Duration
	// LockWait is how long a turn waits for the session's previous turn to be stored before it
	// is refused with 409 session_busy: a client sends its next turn as soon as the last
	// answer's final bytes arrive, a moment before the gateway has stored that answer and
	// released the lock. Default 2 s; negative: no wait.
	LockWait time.Duration
	// MaxTurn bounds how long a turn's lock is renewed (a turn whose body is never finished);
	// default 1 h.
	MaxTurn time.Duration
	// StoreTimeout bounds the store calls made once the answer is done (storing the turn,
	// renewing and releasing the lock), which the client's context no longer bounds; default 5 s.
	StoreTimeout time.Duration
	// Metrics default to NewMetrics() (unregistered).
	Metrics *Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock of creation and expiry times; default time.Now.
	Now func() time.Time
}

// ModelOptions are one model's session settings.
type ModelOptions struct {
	// ContextWindow, in tokens, is what a turn's prompt and its max_tokens (or
	// max_completion_tokens) must fit: the oldest turns are left out until they do. 0: no
	// trimming.
	ContextWindow int
	// Tokens counts a prompt's tokens for the window: exactly with the model's tokenizer and
	// chat template, or EstimateTokens (the default).
	Tokens TokenCounter
	// MaxBytes bounds the bytes of a session's stored messages; the oldest turns are dropped
	// beyond it. Default 1 MiB.
	MaxBytes int
	// MaxMessages bounds the number of a session's stored messages, likewise. Default 1000.
	MaxMessages int
	// TTL is how long a session lives after its creation or its last turn, and the most a
	// client may ask for; default 1 h.
	TTL time.Duration
}

func (o ModelOptions) withDefaults() ModelOptions {
	if o.Tokens == nil {
		o.Tokens = EstimateTokens
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 20
	}
	if o.MaxMessages <= 0 {
		o.MaxMessages = 1000
	}
	o.MaxMessages = min(o.MaxMessages, maxStoredMessages)
	if o.TTL <= 0 {
		o.TTL = time.Hour
	}
	return o
}

// Manager serves chat sessions: the stage of each model's requests, and the HTTP API.
type Manager struct {
	opts   Options
	models map[string]ModelOptions
	m      *Metrics
	log    *slog.Logger
}

// New returns a Manager.
func New(opts Options) *Manager {
	if opts.Owner == nil {
		opts.Owner = func(context.Context) string { return "" }
	}
	if opts.LockLease <= 0 {
		opts.LockLease = 30 * time.Second
	}
	if opts.LockWait == 0 {
		opts.LockWait = 2 * time.Second
	}
	if opts.MaxTurn <= 0 {
		opts.MaxTurn = time.Hour
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = 5 * time.Second
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	mm := make(map[string]ModelOptions, len(opts.Models))
	for name, mo := range opts.Models {
		mm[name] = mo.withDefaults()
	}
	return &Manager{opts: opts, models: mm, m: opts.Metrics, log: opts.Logger}
}

// The answers for sessions that cannot be used.
func notFound(id string) *pipeline.Error {
	return pipeline.NotFound("session_id", "session_not_found", fmt.Sprintf(
		"No session `%s`: it does not exist, it expired, or it belongs to another API key.", httpapi.Truncate(id, 64)))
}

func busy(id string) *pipeline.Error {
	return &pipeline.Error{Status: http.StatusConflict, Type: "invalid_request_error", Param: "session_id",
		Code: "session_busy", Message: fmt.Sprintf(
			"Another turn of session `%s` is in progress; send the next turn once its answer has ended.", id)}
}

func storeUnavailable() *pipeline.Error {
	return pipeline.Unavailable("session_store_unavailable", time.Second,
		"The chat session store is unavailable, so the session cannot be read or written; nothing was stored. Retry shortly.")
}

// storeError is the answer for a store's failure: ErrNotFound and ErrBusy are the client's,
// anything else the store's (logged and counted, 503).
func (m *Manager) storeError(ctx context.Context, op, id string, err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return notFound(id)
	case errors.Is(err, ErrBusy):
		return busy(id)
	case ctx.Err() != nil:
		return pipeline.Canceled(ctx.Err())
	}
	m.m.storeErrors.WithLabelValues(op).Inc()
	m.log.WarnContext(ctx, "chat session store failed", "op", op, "session", id, "error", err)
	return storeUnavailable()
}

// Interceptor is the stage of model's requests. A request naming no session passes on
// untouched (a check of the header and a search of the body's bytes). For a model without
// sessions (not in Options.Models) the stage only refuses requests that name one, so a
// session id is never silently ignored; the runtime may leave it out for such models.
func (m *Manager) Interceptor(model string) pipeline.Interceptor {
	mo, enabled := m.models[model]
	return func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			id, ok, err := sessionID(req)
			switch {
			case err != nil:
				return nil, err
			case !ok:
				return next(ctx, req)
			case !enabled:
				return nil, pipeline.InvalidRequest("session_id", "sessions_not_enabled", fmt.Sprintf(
					"Model `%s` has no chat sessions.", model))
			case req.Path != chatstream.ChatPath:
				return nil, pipeline.InvalidRequest("session_id", "sessions_not_supported", fmt.Sprintf(
					"Chat sessions are for %s only, not %s.", chatstream.ChatPath, req.Path))
			case !ValidID(id):
				return nil, notFound(id)
			}
			return m.turn(ctx, next, req, model, mo, id)
		}
	}
}

// sessionID reads the session a request names: the header, or the body's session_id (both
// may be given if they agree).
func sessionID(req *pipeline.Request) (id string, ok bool, err error) {
	if req.Header != nil {
		id = req.Header.Get(HeaderSessionID)
	}
	// A body names a session only if its bytes hold the key: most requests are not parsed.
	has, err := req.Has("session_id")
	if err != nil {
		return "", false, err
	}
	if !has {
		return id, id != "", nil
	}
	w, err := req.Wire()
	if err != nil {
		return "", false, err
	}
	raw, _ := w.Get("session_id")
	var bodyID string
	if json.Unmarshal(raw, &bodyID) != nil {
		return "", false, pipeline.InvalidRequest("session_id", "invalid_type", "session_id must be a string.")
	}
	if id != "" && bodyID != id {
		return "", false, pipeline.InvalidRequest("session_id", "session_id_mismatch", fmt.Sprintf(
			"The %s header and the body's session_id name different sessions.", HeaderSessionID))
	}
	return bodyID, bodyID != "", nil
}

// lock takes session id's lock, waiting up to LockWait for a turn in progress to end.
func (m *Manager) lock(ctx context.Context, model, id string) (*Session, string, error) {
	owner := m.opts.Owner(ctx)
	var deadline time.Time
	wait := 5 * time.Millisecond
	for {
		s, token, err := m.opts.Store.Lock(ctx, owner, id, m.opts.LockLease)
		if !errors.Is(err, ErrBusy) || m.opts.LockWait < 0 {
			return s, token, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(m.opts.LockWait)
			m.m.waits.WithLabelValues(model).Inc()
		}
		if time.Now().Add(wait).After(deadline) {
			return s, token, err
		}
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// turn sends one turn of session id.
func (m *Manager) turn(ctx context.Context, next pipeline.Handler, req *pipeline.Request, model string, mo ModelOptions, id string) (*pipeline.Response, error) {
	s, token, err := m.lock(ctx, model, id)
	if err != nil {
		if errors.Is(err, ErrBusy) {
			m.m.busy.WithLabelValues(model).Inc()
		}
		return nil, m.storeError(ctx, "lock", id, err)
	}
	t := &turnState{m: m, ctx: ctx, s: s, token: token, model: model, mo: mo}
	sent, trimmed, err := m.prepare(ctx, req, s, mo)
	if err != nil {
		t.release("")
		return nil, err
	}
	t.sent = sent
	if s.Endpoint != "" && m.opts.Prefer != nil {
		ctx = m.opts.Prefer(ctx, s.Endpoint)
	}
	t.renewLater()
	res, err := next(ctx, req)
	if err != nil {
		t.release(turnNotStored)
		return nil, err
	}
	if res.GatewayHeader == nil {
		res.GatewayHeader = http.Header{}
	}
	res.GatewayHeader.Set(HeaderSessionID, id)
	if trimmed > 0 {
		m.m.trimmed.WithLabelValues(model).Add(float64(trimmed))
		res.GatewayHeader.Set(HeaderTrimmedTokens, strconv.Itoa(trimmed))
	}
	if res.StatusCode != http.StatusOK || res.Body == nil {
		t.release(turnNotStored)
		return res, nil
	}
	b := &turnBody{Body: res.Body, t: t, endpoint: res.Endpoint, limit: mo.MaxBytes + 64<<10}
	if res.Stream || req.Stream() {
		b.asm = chatstream.NewAssembler(chatstream.ChatPath, mo.MaxBytes)
		b.events = pipeline.NewEventTap(mo.MaxBytes+64<<10, b.asm.Add)
	}
	res.Body = b
	return res, nil
}

// prepare rewrites req as the turn goes upstream: the session's history, trimmed to the
// window, then the request's messages; no session_id. It returns the messages sent and the
// tokens trimmed.
func (m *Manager) prepare(ctx context.Context, req *pipeline.Request, s *Session, mo ModelOptions) ([]json.RawMessage, int, error) {
	if req.Model() != s.Model {
		return nil, 0, pipeline.InvalidRequest("model", "session_model_mismatch", fmt.Sprintf(
			"Session `%s` is a conversation with model `%s`, not `%s`.", s.ID, s.Model, httpapi.Truncate(req.Model(), 256)))
	}
	w, err := req.Wire()
	if err != nil {
		return nil, 0, err
	}
	raw, _ := w.Get("messages")
	var msgs []json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil || len(msgs) == 0 {
		return nil, 0, pipeline.InvalidRequest("messages", "invalid_type", "messages must be a non-empty array of message objects.")
	}
	for i, msg := range msgs {
		if len(msg) == 0 || msg[0] != '{' {
			return nil, 0, pipeline.InvalidRequest(fmt.Sprintf("messages[%d]", i), "invalid_type", "Each message must be an object.")
		}
	}
	conv := split(s.Messages)
	// The request's own system prompt replaces the session's.
	n := 0
	for n < len(msgs) && isSystem(role(msgs[n])) {
		n++
	}
	if n > 0 {
		conv.system = msgs[:n:n]
	}
	tail := msgs[n:]
	drop, trimmed := 0, 0
	if mo.ContextWindow > 0 {
		drop, trimmed, err = trimWindow(ctx, conv, tail, mo.ContextWindow, max(req.Routing().MaxTokens, 0), mo.Tokens)
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, pipeline.Canceled(ctx.Err())
			}
			return nil, 0, pipeline.ServerError(http.StatusInternalServerError, "token_count_failed",
				"Counting the session's tokens failed: "+err.Error())
		}
	}
	sent := conv.flatten(drop, tail)
	// The edit is encoded once, with any later stage's, when the body goes upstream: members
	// sorted, so the same turn makes the same body (the response cache's key).
	if err := req.Edit(func(b *openaiwire.Body) error {
		b.Set("messages", joinMessages(sent))
		b.Drop("session_id")
		return nil
	}); err != nil {
		return nil, 0, err
	}
	if req.Header != nil && req.Header.Get(HeaderSessionID) != "" {
		req.Header = req.Header.Clone()
		req.Header.Del(HeaderSessionID)
	}
	return sent, trimmed, nil
}

// joinMessages is msgs as one JSON array. The messages are written as they are: they are valid
// JSON, decoded from the request or the store, and re-encoding them would cost more than the
// rest of the turn.
func joinMessages(msgs []json.RawMessage) []byte {
	n := 2
	for _, m := range msgs {
		n += len(m) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m...)
	}
	return append(b, ']')
}

// turnState is a turn between its lock and its end.
type turnState struct {
	m     *Manager
	ctx   context.Context // the request's: its values, for logs
	s     *Session
	token string
	model string
	mo    ModelOptions
	sent  []json.RawMessage

	mu      sync.Mutex
	ended   bool
	timer   *time.Timer
	renewTo time.Time // renewals stop here (MaxTurn)
}

// detached is a context for the store calls after the request: the request's values, not its
// cancellation, bounded by StoreTimeout.
func (t *turnState) detached() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(t.ctx), t.m.opts.StoreTimeout)
}

// renewLater renews the lock every third of its lease until the turn ends.
func (t *turnState) renewLater() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.renewTo = time.Now().Add(t.m.opts.MaxTurn)
	t.timer = time.AfterFunc(t.m.opts.LockLease/3, t.renew)
}

func (t *turnState) renew() {
	t.mu.Lock()
	if t.ended || time.Now().After(t.renewTo) {
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	ctx, cancel := t.detached()
	err := t.m.opts.Store.Renew(ctx, t.s.ID, t.token, t.m.opts.LockLease)
	cancel()
	switch {
	case errors.Is(err, ErrLockLost):
		return // the commit will find out
	case err != nil:
		t.m.m.storeErrors.WithLabelValues("renew").Inc()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ended {
		t.timer.Reset(t.m.opts.LockLease / 3)
	}
}

// end stops the renewals; it reports false if the turn had already ended.
func (t *turnState) end() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return false
	}
	t.ended = true
	if t.timer != nil {
		t.timer.Stop()
	}
	return true
}

// release ends the turn without storing it, counting it as result unless that is "".
func (t *turnState) release(result string) {
	if !t.end() {
		return
	}
	if result != "" {
		t.m.m.turns.WithLabelValues(t.model, result).Inc()
	}
	ctx, cancel := t.detached()
	defer cancel()
	if err := t.m.opts.Store.Unlock(ctx, t.s.ID, t.token); err != nil {
		// The lease frees the session.
		t.m.m.storeErrors.WithLabelValues("unlock").Inc()
		t.m.log.WarnContext(ctx, "releasing a chat session's lock failed", "session", t.s.ID, "error", err)
	}
}

// commit ends the turn storing it: what was sent, then the answer.
func (t *turnState) commit(answer json.RawMessage, endpoint string) {
	if !t.end() {
		return
	}
	msgs := append(t.sent[:len(t.sent):len(t.sent)], answer)
	msgs, _ = bound(msgs, t.mo.MaxBytes, t.mo.MaxMessages)
	s := t.s.clone()
	s.Messages, s.Expires = msgs, t.m.opts.Now().Add(s.TTL)
	if endpoint != "" {
		s.Endpoint = endpoint
	}
	ctx, cancel := t.detached()
	defer cancel()
	err := t.m.opts.Store.Commit(ctx, t.s.ID, t.token, s)
	switch {
	case err == nil:
		t.m.m.turns.WithLabelValues(t.model, turnStored).Inc()
	case errors.Is(err, ErrLockLost) || errors.Is(err, ErrNotFound):
		t.m.m.turns.WithLabelValues(t.model, turnLost).Inc()
		t.m.log.InfoContext(ctx, "a chat session's turn was not stored: its lock expired or the session was deleted meanwhile",
			"session", t.s.ID, "error", err)
	default:
		t.m.m.turns.WithLabelValues(t.model, turnNotStored).Inc()
		t.m.m.storeErrors.WithLabelValues("commit").Inc()
		t.m.log.WarnContext(ctx, "storing a chat session's turn failed; the session stays as it was", "session", t.s.ID, "error", err)
		_ = t.m.opts.Store.Unlock(ctx, t.s.ID, t.token)
	}
}

// turnBody passes the answer through unchanged and keeps a copy on the side (a non-streamed
// answer's bytes, up to limit; a stream's events, assembled), so that the turn is stored once
// the body ended whole and was passed on.
type turnBody struct {
	pipeline.Body
	t        *turnState
	endpoint string
	limit    int

	mu       sync.Mutex
	buf      []byte // a non-streamed answer
	over     bool   // it passed limit
	asm      *chatstream.Assembler
	events   *pipeline.EventTap
	eof      bool
	finished bool
}

func (b *turnBody) Read(p []byte) (int, error) {
	n, err := b.Body.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.events != nil {
		b.events.Write(p[:n])
	} else if !b.over {
		if len(b.buf)+n > b.limit {
			b.over, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
		}
	}
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Finish implements pipeline.Body: the turn is stored when the body was read to its end (a
// stream: to its [DONE]) without the upstream or the client failing, and held a whole answer.
func (b *turnBody) Finish(clientErr error) pipeline.Usage {
	usage := b.Body.Finish(clientErr)
	b.mu.Lock()
	if b.finished {
		b.mu.Unlock()
		return usage
	}
	b.finished = true
	answer, ok := b.answer()
	ok = ok && clientErr == nil && b.Body.Err() == nil
	b.mu.Unlock()
	if ok {
		b.t.commit(answer, b.endpoint)
	} else {
		b.t.release(turnNotStored)
	}
	return usage
}

// answer is the assistant's message of a whole answer: a body read to its end, or a stream
// read to its [DONE] (a surface that decodes the events stops there, and the body's end may
// come much later). Call with mu held.
func (b *turnBody) answer() (json.RawMessage, bool) {
	if b.events != nil {
		done := b.events.Done() // before End, which may take an unterminated event (as respcache does)
		b.events.End()
		if b.events.Err() != nil || !b.eof && !done {
			return nil, false
		}
		resp, ok := b.asm.Result()
		if !ok {
			return nil, false
		}
		return assistantMessage(resp)
	}
	if b.over || !b.eof {
		return nil, false
	}
	return assistantMessage(b.buf)
}

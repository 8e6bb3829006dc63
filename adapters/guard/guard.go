package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/adapters/openai"
	"github.com/infergate/infergate/engines"
)

// Options configures a Guard.
type Options struct {
	// Shedder bounds requests in flight; nil admits any number.
	Shedder *Shedder
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Guard admits or refuses each request for a model, whatever surface it came in on: the API key's
// model allow-list (403 / PERMISSION_DENIED) and load shedding (429 / RESOURCE_EXHAUSTED when
// full, 503 / UNAVAILABLE after waiting too long). Its KServe and OpenAI hooks plug into the
// model registry and the OpenAI proxy; a request that passes one (an LLM reached through the
// KServe bridge) is not counted again by the other.
type Guard struct {
	opts Options
	log  *slog.Logger
}

// New returns a guard.
func New(opts Options) *Guard {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Shedder == nil {
		opts.Shedder = NewShedder(ShedderConfig{})
	}
	return &Guard{opts: opts, log: opts.Logger}
}

type admittedKey struct{}

type priorityKey struct{}

// WithPriority marks the requests made with ctx (batch workers mark theirs Batch).
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

func priorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}

// refusal is why a request was refused, in terms every surface can render.
type refusal struct {
	code       connect.Code
	status     int
	errType    string // OpenAI's error type
	errCode    string // OpenAI's error code
	msg        string
	retryAfter time.Duration
}

func (r *refusal) header() http.Header {
	h := http.Header{}
	if r.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((r.retryAfter+time.Second-1)/time.Second)))
	}
	return h
}

func (r *refusal) connectError() *connect.Error {
	e := connect.NewError(r.code, errors.New(r.msg))
	for k, vv := range r.header() {
		e.Meta()[k] = vv
	}
	return e
}

func (r *refusal) openAIError() *openai.Error {
	return &openai.Error{Status: r.status, Type: r.errType, Code: r.errCode, Message: r.msg, Header: r.header()}
}

// ticket is an admitted request.
type ticket struct {
	ctx     context.Context
	release func()
}

var noRelease = func() {}

// admit decides on one request for model.
func (g *Guard) admit(ctx context.Context, model string) (*ticket, *refusal) {
	if ctx.Value(admittedKey{}) != nil {
		return &ticket{ctx: ctx, release: noRelease}, nil
	}
	if p := PrincipalFrom(ctx); p != nil && !p.MayUse(model) {
		return nil, &refusal{code: connect.CodePermissionDenied, status: http.StatusForbidden,
			errType: "invalid_request_error", errCode: "model_not_allowed",
			msg: fmt.Sprintf("the API key '%s' may not use model '%s'", p.Name, model)}
	}
	release, err := g.opts.Shedder.Acquire(ctx, model, priorityOf(ctx))
	if err != nil {
		return nil, g.shedRefusal(ctx, err)
	}
	return &ticket{ctx: context.WithValue(ctx, admittedKey{}, true), release: release}, nil
}

func (g *Guard) shedRefusal(ctx context.Context, err error) *refusal {
	switch {
	case errors.Is(err, ErrOverloaded):
		return &refusal{code: connect.CodeResourceExhausted, status: http.StatusTooManyRequests,
			errType: "server_error", errCode: "overloaded", msg: err.Error(), retryAfter: g.opts.Shedder.RetryAfter()}
	case errors.Is(err, ErrQueueTimeout):
		return &refusal{code: connect.CodeUnavailable, status: http.StatusServiceUnavailable,
			errType: "server_error", errCode: "queue_timeout", msg: err.Error(), retryAfter: g.opts.Shedder.RetryAfter()}
	}
	// The caller went away while waiting: nobody reads the answer, but keep it truthful.
	return &refusal{code: connect.CodeCanceled, status: 499, errType: "server_error", msg: ctx.Err().Error()}
}

// KServe is the model registry's Admission: every KServe request, on every transport.
func (g *Guard) KServe() engines.Admission {
	return func(ctx context.Context, e *engines.Entry, _ *engines.Request) (context.Context, func(error), error) {
		t, r := g.admit(ctx, e.Name())
		if r != nil {
			return nil, nil, r.connectError()
		}
		return t.ctx, func(error) { t.release() }, nil
	}
}

// OpenAI is the OpenAI proxy's Admission: every request of its HTTP API and OpenAIService.
func (g *Guard) OpenAI() openai.Admission {
	return func(ctx context.Context, model string, _ []byte) (openai.Admitted, error) {
		t, r := g.admit(ctx, model)
		if r != nil {
			return openai.Admitted{}, r.openAIError()
		}
		return openai.Admitted{Context: t.ctx, Done: func(openai.Usage) { t.release() }}, nil
	}
}

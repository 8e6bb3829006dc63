// Command requestlog shows how a Go program adds its own stage to infergate's LLM request
// pipeline: an interceptor that writes one structured log line per request, when its response
// has been passed on, with what the request used.
//
//	go run ./examples/requestlog -upstream http://localhost:8001 -addr :8000
//
// serves OpenAI's API (HTTP, streaming included) and infergate.openai.v1.OpenAIService (gRPC,
// gRPC-Web, Connect) on -addr, in front of the OpenAI-compatible server at -upstream (vLLM,
// Ollama, ...). Every request, whichever surface it came in on, passes through logRequests:
//
//	level=INFO msg="llm request" id=5c1e... model=llama path=/v1/chat/completions status=200
//	  endpoint=upstream duration=412ms prompt_tokens=7 completion_tokens=4
//
// An interceptor may also answer a request itself (return a Response without calling next: a
// cache hit), rewrite it (Request.SetBody), or call next more than once.
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
	"google.golang.org/grpc"
)

// logRequests is the example's stage. It logs a request the gateway answered itself (no model,
// a refusal, no healthy upstream) at once, and any other when its response body is finished:
// only then are the status, the whole duration and the upstream's token counts known.
func logRequests(log *slog.Logger) pipeline.Interceptor {
	return func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			res, err := next(ctx, req)
			if err != nil {
				log.LogAttrs(ctx, slog.LevelWarn, "llm request", slog.String("id", req.ID), slog.String("model", req.Model()),
					slog.String("path", req.Path), slog.String("err", err.Error()), slog.Duration("duration", time.Since(req.Start)))
				return nil, err
			}
			res.Body = &loggedBody{Body: res.Body, log: log, ctx: ctx, req: req, endpoint: res.Endpoint}
			return res, nil
		}
	}
}

// loggedBody writes the log line when the body is finished, once.
type loggedBody struct {
	pipeline.Body
	log      *slog.Logger
	ctx      context.Context
	req      *pipeline.Request
	endpoint string
	logged   bool
}

func (b *loggedBody) Finish(clientErr error) pipeline.Usage {
	u := b.Body.Finish(clientErr)
	if !b.logged {
		b.logged = true
		attrs := []slog.Attr{slog.String("id", b.req.ID), slog.String("model", b.req.Model()), slog.String("path", b.req.Path),
			slog.Int("status", u.Status), slog.String("endpoint", b.endpoint), slog.Duration("duration", time.Since(b.req.Start)),
			slog.Int64("prompt_tokens", u.PromptTokens), slog.Int64("completion_tokens", u.CompletionTokens)}
		if u.Chunks > 0 {
			attrs = append(attrs, slog.Int64("chunks", u.Chunks))
		}
		if clientErr != nil {
			attrs = append(attrs, slog.String("client_err", clientErr.Error()))
		}
		b.log.LogAttrs(b.ctx, slog.LevelInfo, "llm request", attrs...)
	}
	return u
}

// newGateway serves OpenAI's API in front of the upstream at base, every model's requests passing
// through logRequests. The caller starts the proxy (Start) and closes it after the gateway.
func newGateway(base string, log *slog.Logger) (*gateway.Gateway, *openai.Proxy, error) {
	p, err := openai.New(openai.Options{Logger: log,
		Endpoints: []upstream.Endpoint{{Name: "upstream", URL: base, Type: upstream.TypeVLLM}},
		Stages:    pipeline.ForAll(logRequests(log))})
	if err != nil {
		return nil, nil, err
	}
	gw := gateway.New(engines.NewRegistry(), gateway.Config{Logger: log,
		Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	gw.Metrics().MustRegister(p.Collectors()...)
	return gw, p, nil
}

func main() {
	addr := flag.String("addr", ":8000", "listen address")
	upstream := flag.String("upstream", "http://localhost:8001", "base URL of an OpenAI-compatible server (without /v1)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	gw, p, err := newGateway(*upstream, log)
	if err != nil {
		log.Error("config", "err", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Error("listen", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p.Start(ctx)
	defer p.Close()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = gw.Shutdown(shutdown)
	}()
	if err := gw.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

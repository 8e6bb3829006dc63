// Command tokenengine is a stand-in for an inference engine that takes token ids and has no
// tokenizer (Dynamo's token-input workers, vLLM with --skip-tokenizer-init): its /v1/completions
// refuses a text prompt and, by default, answers with the ids it was sent, as token_ids with no
// text. Put infergate in front of it with the model's tokenizer and input: tokens, and a chat
// request comes back as a chat completion whose content is the prompt the engine saw, rendered
// by the chat template and detokenized by the gateway:
//
//	go run ./examples/tokenengine -addr 127.0.0.1:9000 -model qwen
//
// with, in infergate's config:
//
//	upstreams: [{name: engine, url: http://127.0.0.1:9000, type: vllm}]
//	models: {qwen: {tokenizer: lib/tokenizer/testdata/qwen3, input: tokens}}
//
// -reply "some text" answers that text, a word per stream chunk, instead.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/infergate/infergate/stage/tokeninput/tokeninputtest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "address to serve on")
	model := flag.String("model", "qwen", "the model name the engine serves")
	reply := flag.String("reply", "", "answer this text, a word per chunk, instead of the prompt's ids")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, newEngine(*model, *reply), log); err != nil {
		log.Error("tokenengine", "err", err)
		os.Exit(1)
	}
}

// newEngine is the fake: an echo of the prompt's ids, or reply's words.
func newEngine(model, reply string) *tokeninputtest.Engine {
	e := tokeninputtest.New(model)
	if reply == "" {
		e.SetEcho(true)
		return e
	}
	var pieces []string
	for i, w := range strings.Fields(reply) {
		if i > 0 {
			w = " " + w
		}
		pieces = append(pieces, w)
	}
	e.SetReply(pieces...)
	e.SetUsage(true)
	return e
}

// run serves e on addr until ctx ends, then drains for up to 5 s.
func run(ctx context.Context, addr string, e *tokeninputtest.Engine, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: e.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Info("token engine serving", "addr", ln.Addr().String())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

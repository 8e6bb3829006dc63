// Command graniteproc shows how a Go program serves a model through a Granite processor of its
// own: it registers the processor in a granite.Registry, under a name and aliases, and puts
// granitestage's stage for that entry in front of the model, so OpenAI's chat completions for it
// become /v1/completions calls of the rendered prompt through the gateway's routing (health,
// failover, breakers and limits apply) and come back as parsed chat answers.
//
//	go run ./examples/graniteproc -addr :8000                                   # a built-in fake upstream
//	go run ./examples/graniteproc -addr :8000 -upstream http://localhost:8001   # vLLM serving Granite 3.3
//
//	curl localhost:8000/v1/chat/completions -d '{"model":"granite-math",
//	  "messages":[{"role":"user","content":"What is 6 times 7?"}]}'
//
// The processor, finalAnswer, renders prompts as Granite 3.3 does and keeps only the number after
// the model's last "Answer:"; it is registered wrapped in granite.Voting, so each chat request
// samples the model five times (one /v1/completions call with n: 5) and answers with the most
// common number, as granite-io's MajorityVotingProcessor does.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/stage/granitestage"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
	"google.golang.org/grpc"
)

// model is the name clients ask for, and the processor's registry name.
const model = "granite-math"

// finalAnswer is the example's processor. It embeds Granite 3.3's, so it renders prompts the
// same way, and overrides Parse: after Granite's own parsing it keeps the text after the last
// "Answer:", which is what the votes are counted on. Any type with Render and Parse will do.
type finalAnswer struct{ *granite.Processor }

func (f finalAnswer) Parse(gens []granite.Generation, req *granite.ChatRequest) []granite.Result {
	out := f.Processor.Parse(gens, req)
	for i := range out {
		m := &out[i].NextMessage
		if _, after, ok := cutLast(m.Content, "Answer:"); ok {
			m.Content = strings.TrimSpace(after)
		}
	}
	return out
}

func cutLast(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// newRegistry is granite-io's processors plus the example's, under its name and an alias.
func newRegistry() (*granite.Registry, error) {
	reg := granite.NewDefaultRegistry()
	g33 := granite.New(granite.V33)
	e := granite.Entry{Input: g33, Output: finalAnswer{g33}}
	if err := reg.Register(granite.Voting(e, granite.IntegerNormalizer, 5), model, "math"); err != nil {
		return nil, fmt.Errorf("registering %s: %w", model, err)
	}
	return reg, nil
}

// newGateway serves OpenAI's API in front of the upstream at base; requests for model pass
// through granitestage with the registered processor. The caller starts the proxy (Start) and
// closes it after the gateway.
func newGateway(base string, log *slog.Logger) (*gateway.Gateway, *openai.Proxy, error) {
	reg, err := newRegistry()
	if err != nil {
		return nil, nil, err
	}
	e, _ := reg.Lookup(model)
	stage := granitestage.Stage(e, granitestage.Options{})
	p, err := openai.New(openai.Options{Logger: log,
		Endpoints: []upstream.Endpoint{{Name: "upstream", URL: base, Type: upstream.TypeVLLM, Models: []string{model}, SkipDiscovery: true}},
		Stages: func(name string) []pipeline.Interceptor {
			if name == model {
				return []pipeline.Interceptor{stage}
			}
			return nil
		}})
	if err != nil {
		return nil, nil, err
	}
	gw := gateway.New(engines.NewRegistry(), gateway.Config{Logger: log,
		Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	gw.Metrics().MustRegister(p.Collectors()...)
	return gw, p, nil
}

// fakeUpstream is a stand-in for vLLM serving Granite 3.3: /health and /v1/completions, whose
// choices reason a little and end in "Answer: 42", except every third, which says 41. It counts
// the completions calls.
type fakeUpstream struct {
	calls   atomic.Int64
	choices atomic.Int64
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		return
	case "/v1/completions":
	default:
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model  string `json:"model"`
		Prompt string `json:"prompt"`
		N      int    `json:"n"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || req.N > 16 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	f.calls.Add(1)
	type choice struct {
		Index        int    `json:"index"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	}
	out := struct {
		ID      string   `json:"id"`
		Object  string   `json:"object"`
		Model   string   `json:"model"`
		Choices []choice `json:"choices"`
	}{ID: "cmpl-fake", Object: "text_completion", Model: req.Model}
	for i := range max(req.N, 1) {
		answer := 42
		if f.choices.Add(1)%3 == 0 {
			answer = 41
		}
		out.Choices = append(out.Choices, choice{Index: i, Text: fmt.Sprintf("6 times 7: six sevens.\nAnswer: %d", answer), FinishReason: "stop"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func main() {
	addr := flag.String("addr", ":8000", "listen address")
	up := flag.String("upstream", "", "base URL of a vLLM server serving Granite 3.3 as "+model+" (without /v1); empty: a built-in fake")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *up == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Error("listen", "err", err)
			os.Exit(1)
		}
		go func() { _ = http.Serve(ln, &fakeUpstream{}) }()
		*up = "http://" + ln.Addr().String()
		log.Info("fake upstream", "url", *up)
	}
	gw, p, err := newGateway(*up, log)
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

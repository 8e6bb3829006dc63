package app

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/stage/disagg"
	"github.com/infergate/infergate/stage/granitestage"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/stage/kvroute"
	"github.com/infergate/infergate/stage/prompt"
	"github.com/infergate/infergate/stage/sessions"
	"github.com/infergate/infergate/stage/tokeninput"
	"github.com/infergate/infergate/upstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// llmStages is the one place the order of an LLM request's stages is written: every model's
// requests, from every surface (OpenAI HTTP, OpenAIService over gRPC and Connect, the KServe
// bridge, batch workers), pass through them, outermost first, before the upstream exchange:
//
//	console meter: the operator console's figures of the model (requests, refusals, latency,
//	  time to first token, tokens, cache hits), when the console is on (server.console)
//	  -> tracing: a span for the request, as Triton's trace settings sample (an upstream call is
//	  its child, and the upstream gets its traceparent)
//	  -> guard (API key limits, rate limits, load shedding)
//	  -> chat sessions: a turn of a stored conversation gets its history, trimmed to the
//	     context window, and its answer is stored (models.<name>.session)
//	  -> response cache: an exact or semantic repeat is answered from a stored answer, a miss's
//	     answer is stored (models.<name>.cache)
//	  -> usage: the prompt's tokens counted by the gateway when the upstream reports none, so
//	     the guard settles token budgets on exact counts (a model with a tokenizer)
//	  -> prompt: the context-length check (models.<name>.max_model_len, counted with the
//	     model's tokenizer and chat template)
//	  -> token input: chat rendered and tokenized, sent as ids to /v1/completions, the answer
//	     turned back into a chat completion (models.<name>.input: tokens)
//	  -> Granite processing: chat rendered by a Granite processor, sent as a prompt to
//	     /v1/completions, the model's text parsed back into reasoning, citations, hallucinations
//	     and tool calls (models.<name>.processor)
//	  -> disaggregation: prefill then decode (models.<name>.disaggregation)
//	  -> routing and forwarding (the terminal handler: pick, failover, the metered exchange)
//
// A model's stages are chosen once per model, from its models.<name> config.
//
// With sessions on for some model (sm not nil), every model has the sessions stage: a turn
// naming a session on a model without sessions is refused with a clear error, not passed on.
func llmStages(tr *tracing.Tracer, g *guard.Guard, models map[string]*llmModel, sm *sessions.Manager, meter func(model string) pipeline.Interceptor) func(model string) []pipeline.Interceptor {
	named := llmStageList(tr, g, models, sm, meter)
	return func(model string) []pipeline.Interceptor {
		list := named(model)
		out := make([]pipeline.Interceptor, len(list))
		for i, s := range list {
			out[i] = s.stage
		}
		return out
	}
}

// llmStageNames names a model's stages in llmStages' order, for the console.
func llmStageNames(models map[string]*llmModel, sm *sessions.Manager, metered bool) func(model string) []string {
	named := llmStageList(nil, nil, models, sm, nil)
	return func(model string) []string {
		var out []string
		if metered {
			out = append(out, "console meter")
		}
		for _, s := range named(model) {
			out = append(out, s.name)
		}
		return append(out, "routing and forwarding")
	}
}

// namedStage is a stage and the name the console shows it by.
type namedStage struct {
	name  string
	stage pipeline.Interceptor
}

// llmStageList is llmStages with each stage's name. With tr and g nil it only names the stages
// (their interceptors are then nil). meter, when set, is first: it sees every request, the
// guard's refusals included.
func llmStageList(tr *tracing.Tracer, g *guard.Guard, models map[string]*llmModel, sm *sessions.Manager, meter func(model string) pipeline.Interceptor) func(model string) []namedStage {
	var admit, span pipeline.Interceptor
	if g != nil {
		admit = pipeline.Admit(g.OpenAI())
	}
	if tr != nil {
		span = tr.Interceptor()
	}
	return func(model string) []namedStage {
		var stages []namedStage
		if meter != nil {
			stages = append(stages, namedStage{"console meter", meter(model)})
		}
		stages = append(stages, namedStage{"tracing", span}, namedStage{"guard", admit},
			namedStage{"drop client disaggregation params", disagg.DropClientParams})
		if sm != nil {
			stages = append(stages, namedStage{"sessions", sm.Interceptor(model)})
		}
		m := models[model]
		if m == nil {
			return stages
		}
		if m.cache != nil {
			stages = append(stages, namedStage{"cache", m.cache})
		}
		if m.Model != nil {
			stages = append(stages, namedStage{"usage", m.Usage()})
			if m.MaxModelLen() > 0 {
				stages = append(stages, namedStage{"context length", m.Limit(m.needsIDs)})
			}
			if m.tokens {
				stages = append(stages, namedStage{"token input", tokeninput.Stage(m.Model)})
			}
		}
		if m.granite != nil {
			stages = append(stages, namedStage{"granite", m.granite})
		}
		if m.disagg != nil {
			stages = append(stages, namedStage{"disaggregation", m.disagg})
		}
		if m.route != nil {
			stages = append(stages, namedStage{"routing policy", m.route})
		}
		return stages
	}
}

// llmModel is what the gateway knows of a configured model: its tokenizer and chat template
// (nil without models.<name>.tokenizer), how its upstreams take input, and its routing stage
// (nil: the proxy's least-outstanding pick).
type llmModel struct {
	*prompt.Model
	tokens bool // input: tokens
	// needsIDs: a stage after the context-length check reads the prompt's ids (token input,
	// cache-aware routing, disaggregation's prompt length), so the check counts every prompt.
	needsIDs bool
	cache    pipeline.Interceptor // nil: no response cache
	disagg   pipeline.Interceptor // prefill then decode; nil: aggregated
	route    pipeline.Interceptor
	// granite serves chat through a Granite processor (models.<name>.processor); nil: none.
	granite pipeline.Interceptor
}

// loadModels reads each configured model's tokenizer and chat template, and builds its routing;
// an unreadable tokenizer fails start-up, naming the model, the file and the reason.
// With rdb (redis.addr), each cache_aware model's index is shared with the other replicas;
// closers gets what stops the sharing.
func loadModels(cfg map[string]modelConfig, dm *disagg.Metrics, rdb rueidis.Client, redisPrefix string, closers *[]func(), collectors *[]prometheus.Collector, log *slog.Logger) (map[string]*llmModel, error) {
	out := make(map[string]*llmModel, len(cfg))
	granites := granite.NewDefaultRegistry()
	counted := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "infergate_llm_counted_prompt_tokens_total",
		Help: "Prompt tokens the gateway counted with the model's tokenizer for answers whose upstream reported no usage " +
			"(a stream without stream_options.include_usage, a server that sends none); infergate_openai_tokens_total counts those it reported.",
	}, []string{"model"})
	*collectors = append(*collectors, counted)
	km := kvroute.NewMetrics() // cache_aware routing's hits, for every model that has it
	*collectors = append(*collectors, km.Collectors()...)
	for _, name := range slices.Sorted(maps.Keys(cfg)) {
		c := cfg[name]
		lm := &llmModel{tokens: c.Input == "tokens",
			needsIDs: c.Input == "tokens" || c.Routing == "cache_aware" || c.Disaggregation != nil}
		if c.Tokenizer != "" {
			countedHere := counted.WithLabelValues(name)
			m, err := prompt.Load(name, c.Tokenizer, prompt.Options{MaxModelLen: c.MaxModelLen, SpecialInContent: c.SpecialTokensInContent,
				Counted: func(n int64) { countedHere.Add(float64(n)) }})
			if err != nil {
				return nil, fmt.Errorf("models.%s.tokenizer: %w", name, err)
			}
			log.Info("model tokenizer loaded", "model", name, "dir", c.Tokenizer, "vocab", m.Tokenizer().VocabSize(),
				"max_model_len", c.MaxModelLen, "input", cmp.Or(c.Input, "text"))
			lm.Model = m
		}
		switch c.Routing {
		case "round_robin":
			lm.route = roundRobin
		case "cache_aware":
			x := kvroute.New(name, kvroute.Options{BlockSize: c.KVBlockSize, Capacity: c.KVCacheBlocks, Metrics: km})
			if rdb != nil {
				sh := kvroute.Share(x, rdb, kvroute.ShareOptions{Prefix: redisPrefix + ":kvroute:", Logger: log})
				*closers = append(*closers, sh.Close)
				*collectors = append(*collectors, sh.Collectors()...)
			}
			lm.route = x.Stage(lm.Model)
		}
		if c.Processor != "" {
			e, _ := granites.Lookup(c.Processor) // validated with the config
			if v := c.Voting; v != nil {
				e = granite.Voting(e, v.normalizer(), v.Samples)
			}
			lm.granite = granitestage.Stage(e, granitestage.Options{Logger: log, MayDebug: adminOrOpen})
		}
		if d := c.Disaggregation; d != nil {
			lm.disagg = disagg.New(disagg.Options{Model: name, Prefill: d.Prefill, Decode: d.Decode,
				MinPromptTokens: d.MinPromptTokens, MaxPrefillQueue: d.MaxPrefillQueue,
				FailOnPrefillError: d.OnPrefillFailure == "fail", Metrics: dm}).Interceptor()
		}
		out[name] = lm
	}
	return out, nil
}

// roundRobin is the routing stage of models.<name>.routing: round_robin.
func roundRobin(next pipeline.Handler) pipeline.Handler {
	return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		return next(upstream.WithPicker(ctx, upstream.RoundRobin{}), req)
	}
}

// adminOrOpen lets a request see what the gateway made of it (a Granite processor's rendered
// prompt) when API keys are off, or its key is an admin's.
func adminOrOpen(ctx context.Context) bool {
	p := guard.PrincipalFrom(ctx)
	return p == nil || p.Admin
}

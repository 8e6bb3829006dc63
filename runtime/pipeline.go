package main

import (
	"github.com/infergate/infergate/adapters/guard"
	"github.com/infergate/infergate/adapters/pipeline"
)

// llmStages is the one place the order of an LLM request's stages is written: every model's
// requests, from every surface (OpenAI HTTP, OpenAIService over gRPC and Connect, the KServe
// bridge, batch workers), pass through them, outermost first, before the upstream exchange:
//
//	guard (API key limits, rate limits, load shedding)
//	  -> chat sessions -> response cache -> processor / chat template + tokenizer  (per model, to come)
//	  -> routing and forwarding (the terminal handler: pick, failover, the metered exchange)
//
// Today every model gets the guard alone; per-model stages will be chosen here, once per model,
// from its models.<name> config.
func llmStages(g *guard.Guard) func(model string) []pipeline.Interceptor {
	admit := pipeline.Admit(g.OpenAI())
	return func(model string) []pipeline.Interceptor {
		return []pipeline.Interceptor{admit}
	}
}

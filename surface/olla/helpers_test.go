package olla_test

import (
	"io"
	"log/slog"

	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
)

// env is a real gateway on a loopback port with the OpenAI surface and Olla's routes mounted, in
// front of fakes.
type env struct {
	openaitest.Client // the gateway's URL; Post and Get
	srv               *gatewaytest.Server
	proxy             *openai.Proxy
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// benchChat is BenchmarkOllaRoute's chat completions request.
var benchChat = []byte(`{"model":"llama","messages":[{"role":"user","content":"Tell me about the weather in Paris."}],"max_tokens":64}`)

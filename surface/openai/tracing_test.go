package openai_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const clientTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// A traced OpenAI request: the pipeline's span is a child of the client's traceparent, the
// upstream exchange's span a child of it, and the upstream receives that span's traceparent.
func TestTraceparentPropagatedThroughTheProxy(t *testing.T) {
	t.Parallel()
	u := openaitest.Start(t, "a", "llama")
	spans := tracetest.NewInMemoryExporter()
	on := tracing.Settings{Level: tracing.LevelTimestamps, Rate: 1, Count: -1}
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: spans, Synchronous: true, Settings: &on})
	require.NoError(t, err)
	e := startWith(t, openai.Options{Endpoints: []upstream.Endpoint{u.Endpoint(100)}, Stages: pipeline.ForAll(tr.Interceptor())})

	for _, body := range []string{openaitest.ChatBody("llama"), strings.TrimSuffix(openaitest.ChatBody("llama"), "}") + `,"stream":true}`} {
		spans.Reset()
		res, out := e.Post(t, "/v1/chat/completions", body, "traceparent", clientTraceparent)
		require.Equal(t, http.StatusOK, res.StatusCode, out)

		got := spans.GetSpans()
		require.Len(t, got, 2, "the upstream call's span and the request's")
		up, srv := got[0], got[1]
		assert.Equal(t, "upstream a", up.Name)
		assert.Equal(t, trace.SpanKindClient, up.SpanKind)
		assert.Equal(t, "/v1/chat/completions", srv.Name)
		assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", srv.SpanContext.TraceID().String())
		assert.Equal(t, "b7ad6b7169203331", srv.Parent.SpanID().String(), "a child of the client's span")
		assert.Equal(t, srv.SpanContext.SpanID(), up.Parent.SpanID(), "the upstream call is the request's child")
		want := "00-0af7651916cd43dd8448eb211c80319c-" + up.SpanContext.SpanID().String() + "-01"
		assert.Equal(t, want, u.LastHeader().Get("Traceparent"), "the upstream sees the upstream span, not the client's")
		assert.False(t, srv.EndTime.Before(up.EndTime), "the request's span ends with its body")
	}

	// Turned off through the settings: no spans, and the client's traceparent reaches the
	// upstream as it was sent.
	_, err = tr.Update("", map[string][]string{tracing.SettingLevel: {"OFF"}})
	require.NoError(t, err)
	spans.Reset()
	res, out := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"), "traceparent", clientTraceparent)
	require.Equal(t, http.StatusOK, res.StatusCode, out)
	assert.Empty(t, spans.GetSpans())
	assert.Equal(t, clientTraceparent, u.LastHeader().Get("Traceparent"))
}

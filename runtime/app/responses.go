package app

import (
	"log/slog"
	"net/http"

	"github.com/infergate/infergate/store/responsestate"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/responses"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
)

// responsesAPI mounts OpenAI's Responses API (POST /v1/responses and its stored responses'
// routes), served through the gateway's own /v1/chat/completions handler (the mux, after the
// key check) or passed to the upstreams' /v1/responses, per models.<name>.responses (auto by
// default: pass through, and translate for each endpoint that turns out not to serve it). Stored
// responses are kept in the process, or in Redis with redis.addr (shared by the replicas).
//
// It also returns the Batch API's caller: proxy, with /v1/responses lines served by translation
// over the same store.
func responsesAPI(cfg *Config, proxy *openai.Proxy, rdb rueidis.Client, collectors *[]prometheus.Collector,
	log *slog.Logger) (mount func(*http.ServeMux, grpc.ServiceRegistrar), batchCaller responses.Caller) {
	m := responses.NewMetrics()
	*collectors = append(*collectors, m.Collectors()...)
	var store responsestate.Store
	if rdb != nil {
		store = responsestate.NewRedis(rdb, responsestate.RedisOptions{Prefix: redisPrefix(cfg)})
	} else {
		store = responsestate.NewMemory(responsestate.MemoryOptions{})
	}
	mode := func(model string) responses.Mode { return responses.Mode(cfg.Models[model].Responses) }
	batchCaller = responses.NewBatchCaller(proxy, responses.Options{Store: store, Owner: owner, Metrics: m, Logger: log})
	return func(mux *http.ServeMux, _ grpc.ServiceRegistrar) {
		h := responses.New(responses.Options{Chat: mux, Mode: mode, NativeHandler: proxy.Forwarder(),
			Endpoints: proxy.ModelEndpoints, Store: store, Owner: owner, Metrics: m, Logger: log})
		mux.Handle("/v1/responses", h)
		mux.Handle("/v1/responses/", h)
	}, batchCaller
}

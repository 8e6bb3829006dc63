package gateway_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/gen/inference/inferenceconnect"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"google.golang.org/grpc"
)

// BenchmarkHardening is what issue 17's per-request checks cost (the decompression bounds on every
// transport, the header limit): two gateways in one process, one with the checks and one built
// WithoutHardening, called alternately, each call timed, so both arms see the same machine at
// the same moments. It reports each arm's µs per call and hardened-x, the hardened arm's time
// over the other's. Goal: under 1.01x on ModelInfer and on the OpenAI proxy.
func BenchmarkHardening(b *testing.B) {
	up := openaitest.Start(b, "bench", "llama")
	start := func(cfg func(gateway.Config) gateway.Config) *gatewaytest.Server {
		p, err := openai.New(openai.Options{Endpoints: []upstream.Endpoint{{Name: "up", URL: up.URL, Type: upstream.TypeVLLM, CheckInterval: time.Hour}}})
		if err != nil {
			b.Fatal(err)
		}
		p.Start(context.Background())
		b.Cleanup(p.Close)
		return gatewaytest.Start(b, cfg(gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}}))
	}
	arms := [2]*gatewaytest.Server{start(func(c gateway.Config) gateway.Config { return c }), start(gateway.WithoutHardening)}
	req := simpleRequest()
	chat := []byte(`{"model":"llama","messages":[{"role":"user","content":"Tell me about the weather in Paris."}],"max_tokens":64}`)
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	type call func(arm int) error
	calls := map[string]func(b *testing.B) call{
		"ModelInfer-gRPC": func(b *testing.B) call {
			conns := [2]*grpc.ClientConn{dial(b, arms[0].Addr), dial(b, arms[1].Addr)}
			return func(arm int) error {
				return conns[arm].Invoke(context.Background(), modelInferMethod, req, new(inference.ModelInferResponse))
			}
		},
		"ModelInfer-Connect": func(b *testing.B) call {
			cs := [2]inferenceconnect.GRPCInferenceServiceClient{
				inferenceconnect.NewGRPCInferenceServiceClient(httpc, arms[0].URL),
				inferenceconnect.NewGRPCInferenceServiceClient(httpc, arms[1].URL)}
			return func(arm int) error {
				_, err := cs[arm].ModelInfer(context.Background(), req)
				return err
			}
		},
		"chat-OpenAI": func(b *testing.B) call {
			return func(arm int) error {
				res, err := httpc.Post(arms[arm].URL+"/v1/chat/completions", "application/json", bytes.NewReader(chat))
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				return err
			}
		},
	}
	for _, name := range []string{"ModelInfer-gRPC", "ModelInfer-Connect", "chat-OpenAI"} {
		for _, c := range []int{1, 16} {
			b.Run(name+"/c="+itoa(c), func(b *testing.B) {
				do := calls[name](b)
				for arm := range arms {
					if err := do(arm); err != nil { // a broken arm must not look fast
						b.Fatal(err)
					}
				}
				var mu sync.Mutex
				var spent [2]time.Duration
				b.SetParallelism((c + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					var local [2]time.Duration
					for i := 0; pb.Next(); i++ {
						for k := range 2 {
							arm := (i + k) % 2 // alternate which arm goes first
							t0 := time.Now()
							if err := do(arm); err != nil {
								b.Error(err)
								return
							}
							local[arm] += time.Since(t0)
						}
					}
					mu.Lock()
					spent[0] += local[0]
					spent[1] += local[1]
					mu.Unlock()
				})
				b.StopTimer()
				b.ReportMetric(float64(spent[0].Microseconds())/float64(b.N), "hardened-us")
				b.ReportMetric(float64(spent[1].Microseconds())/float64(b.N), "unhardened-us")
				b.ReportMetric(float64(spent[0])/float64(spent[1]), "hardened-x")
			})
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

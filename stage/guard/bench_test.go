package guard_test

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/store/ratelimit"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// The guard's cost on the hot path: ModelInfer on `simple` through a gateway with the whole guard
// on (an API key checked, a per-key and a per-model request budget, a bounded shedder) against the
// same gateway without it, same client, same process. Issue 6's targets: the in-process guard
// costs <= 5% of the throughput; the Redis guard adds at most one Redis round trip to the latency.
// For the Redis guard a third arm, one-rtt, is the bare gateway whose admission makes exactly one
// Redis round trip (a PING): on a machine where the client, the gateway and Redis share the
// cores, a round trip made from inside a request costs more than an idle PING (ping-p50-us), so
// one-rtt is the fair measure of "one round trip added". A fourth arm, decision, is the bare
// gateway whose admission is the Redis limiter's decision alone (one script call).
// c=1/interleaved alternates requests to the four gateways and reports the ratios of the added
// latencies (added-x-rtt, added-x-decision).
//
//	go test ./stage/guard -run '^$' -bench 'BenchmarkGuard' -benchtime 3s -count 3

func BenchmarkGuardInProcess(b *testing.B) {
	benchGuard(b, func(*testing.B) ratelimit.Limiter { return ratelimit.NewLocal(ratelimit.LocalOptions{}) }, nil, nil, nil)
}

func BenchmarkGuardRedis(b *testing.B) {
	srv := redistest.Start(b)
	client := srv.NewClient(b)
	ping := func() time.Duration {
		var lat []time.Duration
		for range 2000 {
			s := time.Now()
			if err := client.Do(context.Background(), client.B().Ping().Build()).Error(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(s))
		}
		slices.Sort(lat)
		return lat[len(lat)/2]
	}
	lim, err := ratelimit.NewRedis(client, ratelimit.RedisOptions{})
	if err != nil {
		b.Fatal(err)
	}
	oneRTT := func(ctx context.Context, _ *engines.Entry, _ *engines.Request) (context.Context, func(error), error) {
		return ctx, func(error) {}, client.Do(ctx, client.B().Ping().Build()).Error()
	}
	// The guard's one Redis call, made alone: the per-key decision the guard asks for.
	decision := func(ctx context.Context, _ *engines.Entry, _ *engines.Request) (context.Context, func(error), error) {
		_, err := lim.Allow(ctx, "key:bench:req", ratelimit.PerMinute(1e12), 1)
		return ctx, func(error) {}, err
	}
	benchGuard(b, func(*testing.B) ratelimit.Limiter { return lim }, ping, oneRTT, decision)
}

func benchGuard(b *testing.B, limiter func(*testing.B) ratelimit.Limiter, ping func() time.Duration, oneRTT, decision engines.Admission) {
	keys, err := guard.NewStaticKeys([]guard.KeyConfig{{Name: "bench", SHA256: guard.HashKey(userKey)}})
	if err != nil {
		b.Fatal(err)
	}
	auth := guard.NewAuth(keys, quietLogger())
	g := guard.New(guard.Options{Logger: quietLogger(),
		Shedder: guard.NewShedder(guard.ShedderConfig{MaxInFlight: 1000, MaxQueue: 1000}),
		Limiter: limiter(b),
		Limits:  guard.Limits{PerKey: guard.Budget{RequestsPerMinute: 1e12}}})
	guarded := gatewaytest.Start(b, gateway.Config{Logger: quietLogger(),
		HTTPMiddleware: []func(http.Handler) http.Handler{auth.HTTP},
		GRPCOptions:    []grpc.ServerOption{auth.GRPCOption()}})
	guarded.Registry.SetAdmission(g.KServe())
	bare := gatewaytest.Start(b, gateway.Config{Logger: quietLogger()})
	type target struct {
		name string
		addr string
	}
	targets := []target{{"infergate", guarded.Addr}, {"baseline", bare.Addr}}
	if oneRTT != nil {
		rtt := gatewaytest.Start(b, gateway.Config{Logger: quietLogger()})
		rtt.Registry.SetAdmission(oneRTT)
		targets = append(targets, target{"one-rtt", rtt.Addr})
		dec := gatewaytest.Start(b, gateway.Config{Logger: quietLogger()})
		dec.Registry.SetAdmission(decision)
		targets = append(targets, target{"decision", dec.Addr})
	}

	if oneRTT != nil {
		// The arms above run one after another, minutes apart on a busy machine; this one
		// sends one request to each gateway per round, in a new random order each round (in a
		// fixed order, the request after a Redis-using one meets a Redis and a client that were
		// just busy), so that all of them see the same load. It reports the guard's added
		// latency over the one-rtt gateway's (added-x-rtt <= 1: the guard adds no more than one
		// Redis round trip) and over the decision gateway's, whose admission is the guard's one
		// limiter call alone (added-x-decision: what the guard adds besides that call).
		b.Run("c=1/interleaved", func(b *testing.B) {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+userKey)
			req := simpleRequest("simple")
			clients := make([]inference.GRPCInferenceServiceClient, len(targets))
			lat := make([][]time.Duration, len(targets))
			for i, tg := range targets {
				conn, err := grpc.NewClient(tg.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				clients[i] = inference.NewGRPCInferenceServiceClient(conn)
				for range 200 {
					if _, err := clients[i].ModelInfer(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
				lat[i] = make([]time.Duration, b.N)
			}
			order := make([]int, len(clients))
			for i := range order {
				order[i] = i
			}
			b.ResetTimer()
			for n := range b.N {
				rand.Shuffle(len(order), func(x, y int) { order[x], order[y] = order[y], order[x] })
				for _, i := range order {
					s := time.Now()
					if _, err := clients[i].ModelInfer(ctx, req); err != nil {
						b.Fatal(err)
					}
					lat[i][n] = time.Since(s)
				}
			}
			b.StopTimer()
			p50 := make([]float64, len(targets))
			for i, tg := range targets {
				slices.Sort(lat[i])
				p50[i] = float64(lat[i][b.N/2]) / 1e3
				b.ReportMetric(p50[i], tg.name+"-p50-us")
			}
			b.ReportMetric((p50[0]-p50[1])/(p50[2]-p50[1]), "added-x-rtt")
			b.ReportMetric((p50[0]-p50[1])/(p50[3]-p50[1]), "added-x-decision")
		})
	}
	for _, c := range []int{1, 16} {
		for _, tg := range targets {
			b.Run("c="+strconv.Itoa(c)+"/"+tg.name, func(b *testing.B) {
				conn, err := grpc.NewClient(tg.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				client := inference.NewGRPCInferenceServiceClient(conn)
				ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+userKey)
				req := simpleRequest("simple")
				for range 200 {
					if _, err := client.ModelInfer(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
				var next atomic.Int64
				lat := make([][]time.Duration, c)
				var wg sync.WaitGroup
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				for w := range c {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							s := time.Now()
							if _, err := client.ModelInfer(ctx, req); err != nil {
								b.Error(err)
								return
							}
							lat[w] = append(lat[w], time.Since(s))
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				all := slices.Concat(lat...)
				slices.Sort(all)
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
				b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
				if ping != nil && tg.name == "infergate" && c == 1 {
					b.ReportMetric(float64(ping().Microseconds()), "ping-p50-us")
				}
			})
		}
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// BenchmarkGuardAdmit is the guard's own cost per request, without the network around it: the
// KServe admission (a key's model allow-list, two request budgets in the in-process limiter, a
// bounded shedder) against an admission that does nothing. Its ns/op over a ModelInfer's
// (~100 µs on these machines) is the share of throughput the in-process guard costs.
func BenchmarkGuardAdmit(b *testing.B) {
	g := guard.New(guard.Options{Logger: quietLogger(),
		Shedder: guard.NewShedder(guard.ShedderConfig{MaxInFlight: 1000, MaxQueue: 1000}),
		Limiter: ratelimit.NewLocal(ratelimit.LocalOptions{}),
		Limits: guard.Limits{PerKey: guard.Budget{RequestsPerMinute: 1e12},
			PerModel: guard.Budget{RequestsPerMinute: 1e12}}})
	reg := engines.NewRegistry()
	entry, err := reg.Register(rawModel{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := guard.WithPrincipal(context.Background(), &guard.Principal{Name: "bench", Models: []string{"m"}})
	for _, tg := range []struct {
		name  string
		admit engines.Admission
	}{
		{"infergate", g.KServe()},
		{"baseline", func(ctx context.Context, _ *engines.Entry, _ *engines.Request) (context.Context, func(error), error) {
			return ctx, func(error) {}, nil
		}},
	} {
		b.Run(tg.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, done, err := tg.admit(ctx, entry, nil)
					if err != nil {
						b.Fatal(err)
					}
					done(nil)
				}
			})
		})
	}
}

type rawModel struct{}

func (rawModel) Config() *inference.ModelConfig {
	return &inference.ModelConfig{Name: "m", Output: []*inference.ModelOutput{{Name: "o", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}}}
}

func (rawModel) Execute(context.Context, *engines.Request, func(*engines.Response) error) error {
	return nil
}

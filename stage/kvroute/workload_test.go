package kvroute_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/vllmsim"
	"github.com/infergate/infergate/stage/kvroute"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
)

// workload is a multi-turn chat workload: conversations of turns, each sharing one of four
// system prompts, each turn's request holding the whole conversation so far.
type workload struct {
	conversations, turns, workers int
	capacity                      int // blocks each engine caches
	prefill, decode               time.Duration
}

// result is what one routing policy did with a workload.
type result struct {
	policy         string
	hitRate        float64
	p50, p99       time.Duration
	imbalance      float64 // max / mean requests per endpoint
	requests       []int64
	recomputedOrFF int64
}

// workingSetBlocks estimates the workload's distinct prompt blocks: each conversation's last
// prompt, in the simulator's 4-byte tokens and 16-token blocks.
func (w workload) workingSetBlocks() int {
	msgs := conversation(0, w.turns)
	return w.conversations * len(msgs) / 64
}

// conversation is conversation c's messages (JSON, without brackets) up to turn (exclusive of
// the answer to it).
func conversation(c, turn int) string {
	sys := fmt.Sprintf("You are assistant model %d of the support team. ", c%4)
	msgs := fmt.Sprintf(`{"role":"system","content":%q}`, strings.Repeat(sys, 8))
	for t := 0; t <= turn && t < 64; t++ {
		if t > 0 {
			msgs += fmt.Sprintf(`,{"role":"assistant","content":%q}`, strings.Repeat(fmt.Sprintf("Answer %d to %d. ", t-1, c), 12))
		}
		msgs += fmt.Sprintf(`,{"role":"user","content":%q}`, strings.Repeat(fmt.Sprintf("Conversation %d asks question %d. ", c, t), 12))
	}
	return msgs
}

// run replays w through a proxy in front of four simulated engines, routed by stage (nil: the
// proxy's least-outstanding pick).
func (w workload) run(tb testing.TB, policy string, stage pipeline.Interceptor) result {
	var sims []*vllmsim.Server
	var eps []upstream.Endpoint
	for i := range 4 {
		s := vllmsim.Start(tb, vllmsim.Config{Model: "m", CapacityBlocks: w.capacity, PrefillPerToken: w.prefill,
			DecodePerToken: w.decode, MaxConcurrent: 4})
		sims = append(sims, s)
		eps = append(eps, upstream.Endpoint{Name: fmt.Sprint("e", i), URL: s.URL, Type: upstream.TypeVLLM,
			CheckInterval: time.Hour, CheckTimeout: time.Second})
	}
	opts := openai.Options{Endpoints: eps, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if stage != nil {
		opts.Stages = pipeline.ForAll(stage)
	}
	p, err := openai.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	p.Start(context.Background())
	tb.Cleanup(p.Close)

	// Turn by turn: every conversation's turn t, w.workers at a time, then every one's turn t+1,
	// as many users taking turns would; the working set is every conversation.
	var mu sync.Mutex
	var ttfts []time.Duration
	for t := range w.turns {
		convs := make(chan int)
		var wg sync.WaitGroup
		for range w.workers {
			wg.Go(func() {
				for c := range convs {
					body := `{"model":"m","stream":true,"max_tokens":4,"messages":[` + conversation(c, t) + `]}`
					req, err := pipeline.NewRequest("/v1/chat/completions", []byte(body))
					if err != nil {
						tb.Error(err)
						return
					}
					start := time.Now()
					res, err := p.Handle(context.Background(), req)
					if err != nil {
						tb.Error(err)
						return
					}
					buf := make([]byte, 1)
					_, _ = io.ReadFull(res, buf)
					ttft := time.Since(start)
					_, _ = io.Copy(io.Discard, res)
					res.Body.Finish(nil)
					mu.Lock()
					ttfts = append(ttfts, ttft)
					mu.Unlock()
				}
			})
		}
		for c := range w.conversations {
			convs <- c
		}
		close(convs)
		wg.Wait()
	}

	r := result{policy: policy}
	var prompt, cached, total, most int64
	for _, s := range sims {
		st := s.Stats()
		prompt += st.PromptTokens
		cached += st.CachedTokens
		total += st.Requests
		most = max(most, st.Requests)
		r.requests = append(r.requests, st.Requests)
		r.recomputedOrFF += st.Recomputed + st.ForeignParams
	}
	r.hitRate = float64(cached) / float64(max(prompt, 1))
	r.imbalance = float64(most) / (float64(total) / float64(len(sims)))
	slices.Sort(ttfts)
	if len(ttfts) > 0 {
		r.p50, r.p99 = ttfts[len(ttfts)/2], ttfts[len(ttfts)*99/100]
	}
	return r
}

func policies() []struct {
	name  string
	stage func() pipeline.Interceptor
} {
	return []struct {
		name  string
		stage func() pipeline.Interceptor
	}{
		{"round_robin", func() pipeline.Interceptor {
			return func(next pipeline.Handler) pipeline.Handler {
				return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
					return next(upstream.WithPicker(ctx, upstream.RoundRobin{}), req)
				}
			}
		}},
		{"least_outstanding", func() pipeline.Interceptor { return nil }},
		{"cache_aware", func() pipeline.Interceptor { return kvroute.New("m", kvroute.Options{}).Stage(nil) }},
	}
}

// A conversation's turns, replayed one at a time, hit the engines' prefix caches at least twice
// as often routed cache-aware as routed by load (which, with no load, takes turns): the engines
// have room for a quarter of the conversations each, so only keeping each conversation on one
// engine keeps its history cached.
func TestCacheAwareHitRate(t *testing.T) {
	w := workload{conversations: 41, turns: 8, workers: 1, prefill: -1, decode: -1}
	w.capacity = w.workingSetBlocks() / 4
	hit := map[string]float64{}
	for _, pol := range policies() {
		r := w.run(t, pol.name, pol.stage())
		hit[pol.name] = r.hitRate
		if r.recomputedOrFF != 0 {
			t.Errorf("%s: %d requests the engines should not have seen", pol.name, r.recomputedOrFF)
		}
	}
	t.Logf("hit rates: %v", hit)
	if hit["cache_aware"] < 2*hit["least_outstanding"] {
		t.Errorf("cache-aware hit rate %.2f is not twice least-outstanding's %.2f", hit["cache_aware"], hit["least_outstanding"])
	}
}

// BenchmarkRoutingWorkload replays 201 conversations of 8 turns (16 at a time) through each
// routing policy in front of four simulated engines with room for a quarter of the working set
// each, prefill at 20 µs a token not cached, and prints a table: prefix-cache hit rate, time to
// first token (p50, p99), and load imbalance (max / mean requests per engine). Run it with
// -benchtime 1x: each iteration is the whole workload.
func BenchmarkRoutingWorkload(b *testing.B) {
	w := workload{conversations: 201, turns: 8, workers: 16, prefill: 20 * time.Microsecond, decode: 100 * time.Microsecond}
	w.capacity = w.workingSetBlocks() / 4
	var rows []result
	for b.Loop() {
		rows = rows[:0]
		for _, pol := range policies() {
			rows = append(rows, w.run(b, pol.name, pol.stage()))
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-18s %9s %10s %10s %10s  %s\n", "policy", "hit rate", "TTFT p50", "TTFT p99", "imbalance", "requests per engine")
	for _, r := range rows {
		fmt.Fprintf(&sb, "%-18s %8.1f%% %10s %10s %10.2f  %v\n", r.policy, 100*r.hitRate, r.p50.Round(10*time.Microsecond),
			r.p99.Round(10*time.Microsecond), r.imbalance, r.requests)
		b.ReportMetric(r.hitRate, r.policy+"-hit-rate")
	}
	b.Log(sb.String())
}

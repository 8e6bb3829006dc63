package app

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/openai/openaitest"
)

// BenchmarkGraniteRoundTrip is a chat completion at c=1 through the whole gateway (HTTP in,
// routing, the upstream exchange over loopback) to an in-process fake upstream that answers a
// 4,000-character Granite 3.2 answer with citations and hallucinations at once: through the
// Granite processor (render the prompt, send it to /v1/completions, parse the answer) against
// the same answer forwarded as plain chat, alternating in one process. added-us is what the
// processor costs per request; ratio the processor's round trip over the plain one. The upstream
// here answers at once, so the round trip is the gateway's own work; 5pct-at-upstream-ms is how
// long an upstream would have to take (generating the answer) for the processor to add 5%.
func BenchmarkGraniteRoundTrip(b *testing.B) {
	var answer strings.Builder
	for i := 0; answer.Len() < 3600; i++ {
		fmt.Fprintf(&answer, "Limerick won the title in season number %d of the decade, as the records show <co>%d</co>. ", i, i%3+1)
	}
	answer.WriteString("\n\n# Citations:\n")
	docs := []string{"Limerick won the All-Ireland hurling final in 2018 after a long wait.",
		"Limerick retained the title in 2020 and 2021 under John Kiely.",
		"In 2022 Limerick completed three in a row against Kilkenny."}
	for i, d := range docs {
		fmt.Fprintf(&answer, "<co>%d</co> Document %d: \"%s\"\n", i+1, i, d[:40])
	}
	answer.WriteString("\n# Hallucinations:\n1. Risk low: Limerick won the title in season number 0 of the decade, as the records show.\n")
	up := openaitest.Start(b, "up", "granite", "plain")
	up.SetReply(answer.String())
	addr := startModels(b, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
models:
  granite: {processor: granite3.2}
`, up.URL), "granite")
	var docJSON []string
	for i, d := range docs {
		docJSON = append(docJSON, fmt.Sprintf(`{"title":"doc %d","text":%q}`, i, d))
	}
	body := func(model string) string {
		return `{"model":"` + model + `","max_tokens":1024,"messages":[{"role":"user","content":"Who won the hurling?"}],` +
			`"documents":[` + strings.Join(docJSON, ",") + `],"controls":{"citations":true,"hallucinations":true}}`
	}
	granite, plain := body("granite"), body("plain")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	call := func(body string) time.Duration {
		start := time.Now()
		res, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(out), "Limerick") {
			b.Fatalf("HTTP %d: %.300s", res.StatusCode, out)
		}
		return time.Since(start)
	}
	if out := call(granite); out <= 0 {
		b.Fatal("no time")
	}
	var g, p time.Duration
	for b.Loop() {
		g += call(granite)
		p += call(plain)
	}
	n := float64(b.N)
	b.ReportMetric(float64(g.Microseconds())/n, "granite-us")
	b.ReportMetric(float64(p.Microseconds())/n, "plain-us")
	b.ReportMetric(float64((g-p).Microseconds())/n, "added-us")
	b.ReportMetric(float64(g)/float64(p), "ratio")
	b.ReportMetric(float64((g-p).Microseconds())/n/0.05/1000, "5pct-at-upstream-ms")
}

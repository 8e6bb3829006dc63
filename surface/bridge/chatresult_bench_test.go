package bridge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkChatResult is what chat_result adds to the bridge's reading of one whole Granite
// answer (a 4,000-character content with 40 citations and their documents, as the stage
// answers it): the answer read for text_output and finish_reason only (the baseline, as for a
// request naming only text_output), then read again with chat_result gathered and encoded,
// alternating in one process. added-ns is chat_result's cost per answer; ratio the two.
func BenchmarkChatResult(b *testing.B) {
	var content strings.Builder
	var cites, docs []map[string]any
	for i := 0; content.Len() < 4000; i++ {
		at := content.Len()
		fmt.Fprintf(&content, "Limerick won the title in season number %d of the decade, as the records show. ", i)
		cites = append(cites, map[string]any{"citation_id": fmt.Sprint(i), "doc_id": fmt.Sprint(i % 3), "context_text": "Limerick won.",
			"context_begin": 0, "context_end": 13, "response_text": content.String()[at:], "response_begin": at, "response_end": content.Len()})
	}
	for i := range 3 {
		docs = append(docs, map[string]any{"doc_id": fmt.Sprint(i), "text": strings.Repeat("Limerick won the All-Ireland. ", 10)})
	}
	answer, err := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "model": "granite",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "logprobs": nil,
			"message": map[string]any{"role": "assistant", "content": content.String(), "citations": cites, "documents": docs}}}})
	if err != nil {
		b.Fatal(err)
	}
	read := func(results bool) int {
		acc := newAccumulator(1, results)
		if _, err := acc.add(answer); err != nil {
			b.Fatal(err)
		}
		acc.parseErrors(http.Header{})
		res := acc.response(true)
		n := 0
		for _, o := range res.Outputs {
			n += len(o.Data)
		}
		return n
	}
	if read(true) <= read(false) {
		b.Fatal("no chat_result")
	}
	var plain, with float64
	for b.Loop() {
		plain += measure(func() { read(false) })
		with += measure(func() { read(true) })
	}
	n := float64(b.N)
	b.ReportMetric(plain/n, "plain-ns")
	b.ReportMetric(with/n, "chat_result-ns")
	b.ReportMetric((with-plain)/n, "added-ns")
	b.ReportMetric(with/plain, "ratio")
}

// measure times f in nanoseconds.
func measure(f func()) float64 {
	start := time.Now()
	f()
	return float64(time.Since(start).Nanoseconds())
}

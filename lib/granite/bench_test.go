package granite

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchRequest is a RAG request with tools: the heaviest prompt shape (3 documents, 2 tools,
// a 4-turn conversation, citations and hallucinations).
func benchRequest() *ChatRequest {
	return decodeReqB(`{"messages":[{"role":"user","content":"What do the documents say about hurling in Limerick?"},
{"role":"assistant","content":"They cover the 2018 to 2023 seasons."},{"role":"user","content":"Which titles did they win, and when?"}],
"tools":[{"name":"get_current_weather","description":"Get the current weather","parameters":{"type":"object","properties":{"location":{"type":"string","description":"The location, as \"City, State, Country\"."},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["location"]}},
{"name":"get_stock_price","description":"Retrieve lowest and highest stock price","parameters":{"type":"object","properties":{"symbol":{"type":"string"},"date":{"type":"string"}},"required":["symbol","date"]}}],
"documents":[{"text":"` + strings.Repeat("The 2018 season concluded with Limerick winning the All-Ireland SHC. ", 12) + `"},
{"text":"` + strings.Repeat("The team built on this success, winning the NHL in 2019, 2020 and 2023. ", 12) + `"},
{"text":"` + strings.Repeat("Munster Senior Hurling Championship 2023 completed 4 in a row. ", 12) + `"}],
"controls":{"citations":true,"hallucinations":true}}`)
}

func decodeReqB(s string) *ChatRequest {
	var r ChatRequest
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		panic(err)
	}
	return &r
}

// plainPrompt builds the same kind of prompt by concatenation, tools through
// json.MarshalIndent: what a hand-written template costs, with no validation and no Python
// JSON form. It is the baseline for Render.
func plainPrompt(req *ChatRequest) string {
	var b strings.Builder
	b.WriteString("<|start_of_role|>system<|end_of_role|>" + sysDateHead + "April 01, 2025" + sysDateTail + toolsPart32 + "\n\n" + docsPart[1:] + citations32 + hallucinations32 + "<|end_of_text|>\n")
	tj, _ := json.MarshalIndent(req.Tools, "", "    ")
	b.WriteString("<|start_of_role|>tools<|end_of_role|>")
	b.Write(tj)
	b.WriteString("<|end_of_text|>\n<|start_of_role|>documents<|end_of_role|>")
	for i, d := range req.Documents {
		if i > 0 {
			b.WriteString("\n\n")
		}
		fmt.Fprintf(&b, "Document %d\n%s", i, d.Text)
	}
	b.WriteString("<|end_of_text|>\n")
	for _, m := range req.Messages {
		b.WriteString("<|start_of_role|>" + m.Role + "<|end_of_role|>" + m.Content + "<|end_of_text|>\n")
	}
	b.WriteString(`<|start_of_role|>assistant {"citations": true, "hallucinations": true}<|end_of_role|>`)
	return b.String()
}

func BenchmarkRender(b *testing.B) {
	req := benchRequest()
	p := New(V32, fixedClock("April 01, 2025"))
	var base, ours float64
	b.Run("baseline-concat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = plainPrompt(req)
		}
		base = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("granite3.2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Render(req, true); err != nil {
				b.Fatal(err)
			}
		}
		ours = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		if base > 0 {
			b.ReportMetric(ours/base, "x-baseline")
		}
	})
}

// benchAnswer is a ~4,000-character Granite 3.2 answer with citations and hallucinations.
func benchAnswer() (string, []Document) {
	var b strings.Builder
	docs := benchRequest().Documents
	for i := 0; b.Len() < 3600; i++ {
		fmt.Fprintf(&b, "Limerick won the title in season number %d of the decade, as the records show <co>%d</co>. ", i, i%3+1)
	}
	b.WriteString("\n\n# Citations:\n")
	for i := range 3 {
		fmt.Fprintf(&b, "<co>%d</co> Document %d: \"%s\"\n", i+1, i, strings.TrimSpace(docs[i].Text[:60]))
	}
	b.WriteString("\n# Hallucinations:\n1. Risk low: Limerick won the title in season number 0 of the decade, as the records show.\n2. Risk high: Limerick won the title in season number 1 of the decade, as the records show.\n")
	return b.String(), docs
}

func BenchmarkParse(b *testing.B) {
	text, docs := benchAnswer()
	req := &ChatRequest{Documents: docs, Controls: &Controls{Citations: true, Hallucinations: true}}
	p := New(V32)
	gens := []Generation{{Text: text, StopReason: "stop"}}
	if m := p.Parse(gens, req)[0].NextMessage; len(m.Citations) != 3 || len(m.Hallucinations) != 2 {
		b.Fatalf("bench answer does not parse: %d citations %d hallucinations %s", len(m.Citations), len(m.Hallucinations), m.ParseError)
	}
	type plainMsg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var base, ours float64
	b.Run("baseline-forward", func(b *testing.B) {
		// Plain forwarding of the same answer: wrap the raw text as a chat message.
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(plainMsg{Role: RoleAssistant, Content: text}); err != nil {
				b.Fatal(err)
			}
		}
		base = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("granite3.2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := p.Parse(gens, req)[0].NextMessage
			if _, err := json.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
		ours = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		if base > 0 {
			b.ReportMetric(ours/base, "x-baseline")
		}
	})
}

// BenchmarkParseStream is the incremental parser over the same ~4,000-character answers fed in
// 4-byte pieces (about a token each), Write for every piece and Close, against the whole-answer
// Parse of the same text as the baseline: the ratio is what streaming the parse costs on top.
func BenchmarkParseStream(b *testing.B) {
	cited, docs := benchAnswer()
	var thought strings.Builder
	thought.WriteString("<think>")
	for thought.Len() < 1800 {
		thought.WriteString("Consider the seasons one at a time, and count the titles won. ")
	}
	thought.WriteString("</think><response>")
	for thought.Len() < 3900 {
		thought.WriteString("Limerick won the All-Ireland in 2018, 2020, 2021 and 2022. ")
	}
	thought.WriteString("</response>")
	for _, tc := range []struct {
		name string
		p    *Processor
		req  *ChatRequest
		text string
	}{
		{"citations3.2", New(V32), &ChatRequest{Documents: docs, Controls: &Controls{Citations: true, Hallucinations: true}}, cited},
		{"thinking3.3", New(V33), &ChatRequest{Thinking: true}, thought.String()},
	} {
		gens := []Generation{{Text: tc.text, StopReason: "stop"}}
		var base float64
		b.Run(tc.name+"/baseline-parse", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = tc.p.Parse(gens, tc.req)
			}
			base = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
		b.Run(tc.name+"/stream", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := tc.p.ParseStream(tc.req)
				for i := 0; i < len(tc.text); i += 4 {
					s.Write(tc.text[i:min(i+4, len(tc.text))])
				}
				if _, _, mismatch := s.Close("stop"); mismatch != "" {
					b.Fatal(mismatch)
				}
			}
			if base > 0 {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/base, "x-baseline")
			}
		})
	}
}

package openaiwire

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// agentInput is a Responses request as the Agents SDK sends a conversation in its tenth turn:
// instructions, three function tools, and n input items (user and assistant messages, reasoning,
// function calls and their outputs, in the order a tool-using agent makes them).
func agentInput(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"qwen3-32b","instructions":"You are a helpful travel agent. Use the tools to answer; be concise and cite the tool results.","include":[],"store":true,"stream":false,"parallel_tool_calls":true,"tool_choice":"auto","input":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		switch i % 5 {
		case 0:
			fmt.Fprintf(&b, `{"role":"user","content":"Turn %d: what is the weather in Paris tomorrow, and should I take an umbrella to the museum?"}`, i)
		case 1:
			fmt.Fprintf(&b, `{"type":"reasoning","id":"rs_%d","summary":[{"type":"summary_text","text":"The user wants the forecast; call get_weather for Paris."}]}`, i)
		case 2:
			fmt.Fprintf(&b, `{"type":"function_call","id":"fc_%d","call_id":"chatcmpl-tool-%08d","name":"get_weather","arguments":"{\"city\":\"Paris\",\"day\":\"tomorrow\"}","status":"completed"}`, i, i)
		case 3:
			fmt.Fprintf(&b, `{"type":"function_call_output","call_id":"chatcmpl-tool-%08d","output":"{\"forecast\":\"light rain\",\"high_c\":14,\"low_c\":8,\"precip_mm\":3.2}"}`, i-1)
		case 4:
			fmt.Fprintf(&b, `{"type":"message","id":"msg_%d","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Tomorrow in Paris: light rain, 8\u201314 \u00b0C. Take an umbrella to the museum.","annotations":[]}]}`, i)
		}
	}
	b.WriteString(`],"tools":[`)
	for i, name := range []string{"get_weather", "get_time", "book_museum"} {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"function","name":%q,"description":"Looks up %s for a city.","parameters":{"type":"object","properties":{"city":{"type":"string"},"day":{"type":"string"}},"required":["city","day"],"additionalProperties":false},"strict":true}`, name, name)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkResponsesToChat30 translates a 30-item input (the target: under 30 µs) and,
// in the same run, parses the equivalent chat body with Parse, the chat path's one parse of a
// request: the ratio is what translation costs over what a chat request costs the gateway
// already.
func BenchmarkResponsesToChat30(b *testing.B) {
	body := agentInput(30)
	chat, _, err := ResponsesToChat(body, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var translate, parse time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, _, err := ResponsesToChat(body, nil); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := Parse(chat); err != nil {
			b.Fatal(err)
		}
		translate += t1.Sub(t0)
		parse += time.Since(t1)
	}
	b.ReportMetric(float64(translate.Nanoseconds())/float64(b.N), "translate-ns/op")
	b.ReportMetric(float64(parse.Nanoseconds())/float64(b.N), "chat-parse-ns/op")
	b.ReportMetric(float64(translate)/float64(parse), "ratio")
}

// BenchmarkResponsesStreamChunk is the cost per streamed chunk (the target: under 2
// µs), DecodeChunk included: a text delta, and a tool call's arguments delta.
func BenchmarkResponsesStreamChunk(b *testing.B) {
	for _, c := range []struct{ name, chunk string }{
		{"text", `{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1767000000,"model":"qwen3-32b","choices":[{"index":0,"delta":{"content":" umbrella"},"logprobs":null,"finish_reason":null}]}`},
		{"arguments", `{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1767000000,"model":"qwen3-32b","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Par"}}]},"logprobs":null,"finish_reason":null}]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := NewResponsesStream(ResponsesMeta{ID: "resp_9f2c0123456789abcdef", Model: "qwen3-32b", Store: true})
			out := s.Start(nil)
			out, _ = s.Chunk(out[:0], []byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"chatcmpl-tool-1","function":{"name":"get_weather","arguments":""}}]}}]}`))
			if c.name == "text" {
				out, _ = s.Chunk(out[:0], []byte(`{"choices":[{"index":0,"delta":{"content":"Take"}}]}`))
			}
			data := []byte(c.chunk)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var err error
				if out, err = s.Chunk(out[:0], data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkChatToResponse is the whole answer's translation (encoding/json reads the answer).
func BenchmarkChatToResponse(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"qwen3-32b","choices":[{"index":0,"message":{"role":"assistant","content":"Tomorrow in Paris: light rain, 8-14 C. Take an umbrella.","reasoning":"The forecast says rain.","tool_calls":[{"id":"chatcmpl-tool-1","type":"function","function":{"name":"book_museum","arguments":"{\"city\":\"Paris\",\"day\":\"tomorrow\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":812,"completion_tokens":64,"total_tokens":876,"prompt_tokens_details":{"cached_tokens":768}}}`)
	_, meta, err := ResponsesToChat(agentInput(30), nil)
	if err != nil {
		b.Fatal(err)
	}
	meta.ID = "resp_9f2c0123456789abcdef"
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := ChatToResponse(answer, meta); err != nil {
			b.Fatal(err)
		}
	}
}

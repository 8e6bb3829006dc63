package openaiwire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// decodeSeeds are answers and chunks as upstreams send them (lib/chatstream's and
// stage/tokeninput's test events) and what must go to encoding/json (names it folds, repeats,
// null where a value was expected, numbers it refuses for an integer).
var decodeSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}`,
	`{"id":"c","model":"m","created":1,"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{"reasoning":"think","content":" a  b"},"finish_reason":"stop"}]}`,
	`{"id":"cmpl-1","object":"text_completion","created":2,"model":"m","system_fingerprint":"fp\u00e9<","choices":[{"index":0,"text":" The","logprobs":null,"finish_reason":null}]}`,
	`{"id":"x","created":1,"model":"m","system_fingerprint" : { "a" : 1 } ,"choices":[{"index":0,"text":"a","token_ids":[9707,11,null],"finish_reason":"length","stop_reason":151645}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":1}}}`,
	`{"ID":"cmpl-6","Model":"m","System_Fingerprint":"f","Choices":[{"Index":0,"TEXT":"t","Finish_Reason":"stop"}],"Usage":{"Prompt_Tokens":2}}`,
	`{"id":"a","id":"cmpl-7","choices":[],"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2},"system_fingerprint":"a","system_fingerprint":null}`,
	`{"choices":[null,{"index":1.0}],"created":1e3}`, `{"choices":[{"index":0,"delta":null,"text":null}],"usage":null}`,
	`{"system_fingerprint":5}`, `null`, `[1]`, "{\"id\":\"\\ud800\xff\",\"model\":\"\xc3\"}", `{"\u0069d":"x"}`, `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"function":null}]}}]}`,
	`{"choices":[{"index":99999999999999999999}]}`, `{"a":1}x`, ``,
}

// FuzzDecoders: where the fast path takes an input, it reads what json.Unmarshal reads into
// the mirror; the decoders fail exactly when json.Unmarshal does.
func FuzzDecoders(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecoders(t, data)
	})
}

func TestDecoders(t *testing.T) {
	for _, s := range decodeSeeds {
		checkDecoders(t, []byte(s))
	}
	// What the fast path takes, it reads (not everything goes to the mirror).
	for _, s := range decodeSeeds[:7] {
		_, chunkOK := decodeChunkFast([]byte(s))
		_, completionOK := decodeCompletionFast([]byte(s))
		if !chunkOK && !strings.Contains(s, `"system_fingerprint" : {`) || !completionOK && !strings.Contains(s, "delta") {
			t.Errorf("the fast path gave up on %s (chunk %v, completion %v)", s, chunkOK, completionOK)
		}
	}
	c, err := DecodeChunk([]byte(decodeSeeds[4]))
	if err != nil || *c.Choices[0].Delta.ReasoningContent != "think" {
		t.Fatalf("reasoning is not read as reasoning_content: %+v, %v", c, err)
	}
	if c, err := DecodeChunk([]byte(decodeSeeds[5])); err != nil || string(c.SystemFingerprint) != `"fpé\u003c"` {
		t.Fatalf("the fingerprint as a JSON string: %+v, %v", c, err)
	}
}

func checkDecoders(t *testing.T, data []byte) {
	t.Helper()
	var mc chunk
	cerr := json.Unmarshal(data, &mc)
	got, err := DecodeChunk(data)
	if (err == nil) != (cerr == nil) || err == nil && !reflect.DeepEqual(got, mc.chunk()) {
		t.Fatalf("DecodeChunk(%q) = %+v, %v; encoding/json %+v, %v", data, got, err, mc.chunk(), cerr)
	}
	if fast, ok := decodeChunkFast(data); ok && (cerr != nil || !reflect.DeepEqual(fast, mc.chunk())) {
		t.Fatalf("decodeChunkFast(%q) = %s; encoding/json %s, %v", data, show(fast), show(mc.chunk()), cerr)
	}
	var mp completionAnswer
	perr := json.Unmarshal(data, &mp)
	gotp, err := DecodeCompletion(data)
	if (err == nil) != (perr == nil) || err == nil && !reflect.DeepEqual(gotp, mp.completion()) {
		t.Fatalf("DecodeCompletion(%q) = %+v, %v; encoding/json %+v, %v", data, gotp, err, mp.completion(), perr)
	}
	if fast, ok := decodeCompletionFast(data); ok && (perr != nil || !reflect.DeepEqual(fast, mp.completion())) {
		t.Fatalf("decodeCompletionFast(%q) = %s; encoding/json %s, %v", data, show(fast), show(mp.completion()), perr)
	}
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// BenchmarkDecodeChunk: a vLLM content chunk and a tool-call chunk, on the fast path and through
// the mirror (what the assembler did before: json.Unmarshal).
func BenchmarkDecodeChunk(b *testing.B) {
	for _, bc := range []struct{ name, data string }{{"content", decodeSeeds[1]}, {"tool", decodeSeeds[3]}} {
		data := []byte(bc.data)
		b.Run(bc.name+"/jsonwire", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeChunk(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var m chunk
				if err := json.Unmarshal(data, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

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
	// stage/granitestage's: whole answers and chunks as vLLM sends them (the fast path must take
	// these: TestDecoders), then what goes to encoding/json.
	`{"id":"cmpl-a1","object":"text_completion","created":1732000000,"model":"ibm-granite/granite-3.3-8b-instruct","choices":[{"index":0,"text":"<think>Fir","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`,
	`{"id":"cmpl-a1","object":"text_completion","created":1732000000,"model":"granite","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":null}`,
	`{"id":"cmpl-a1","object":"text_completion","created":1732000000,"model":"granite","choices":[],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4,"prompt_tokens_details":null}}`,
	`{"error":{"object":"error","message":"boom","type":"InternalServerError","param":null,"code":500}}`,
	`{"id":"cmpl-1","object":"text_completion","created":1,"model":"granite","choices":[{"index":0,"text":"a \u003cco\u003e1\u003c/co\u003e.\n","logprobs":null,"finish_reason":"stop","stop_reason":null,"prompt_logprobs":null}],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4,"prompt_tokens_details":null},"system_fingerprint":"fp","kv_transfer_params":null}`,
	` {"choices":[{"text":"x","finish_reason":null},null,{"text":null,"finish_reason":"length"}],"usage":null} `,
	`{"choices":[{"text":"a"}],"choices":[{"text":"b","finish_reason":"stop"}]}`,
	`{"Choices":[{"TEXT":"a"}],"uſage":{"prompt_tokens":1},"ID":"x","mod\u0065l":"m"}`,
	`{"usage":{"prompt_tokens":7.0,"completion_tokens":1e3,"total_tokens":-0}}`, `{"created":"x","choices":[{"index":1.5,"token_ids":"y","stop_reason":1,"text":"t"}]}`,
	`{"error":null,"choices":[{"index":null,"text":null}]}`, `{"choices":[{"index":1.0}]}`, `{"choices":[{"index":-1,"text":"a"}],"choices":null}`,
	`{"id":"c","model":"m","system_fingerprint":"fp","choices":[{"index":1,"text":"é\n","finish_reason":"stop","stop_reason":"</response>"},null],"usage":{"prompt_tokens":7}}`,
	`{"error":{"message":"boom","code":500}}`, `{"choices":[{"index":1e2}]}`, `{"mod\u0065l":"m"}`, `[]`, `{"a":1,}`,
	`{"choices":[],"system_fingerprint":{"a":[1,-2.5e+3,true,false,null,"\ud83d\ude00 \ud800 \udc00x \u00e9 é \ufffd"]}}`,
	`{"choices":[{"text":"\"\\\/\b\f\n\r\t\u0000\u001f \ud83d\u0041"}]}`, `{"usage":{"prompt_tokens":99999999999999999999}}`,
	"{\"choices\":[{\"text\":\"\xff\xc3 \xe2\x80\xa8 \xed\xa0\x80 ok\"}]}", `{"choices":[{"text":1}]}`,
	`{"Model":"x","ERROR":1}`, `{"ſystem_fingerprint":1,"choices":[{"ſtop_reason":2,"text":"é"}]}`, `{"choices":[{"stop_reason":[1,{"a":true}]}]} `, `{"choices":{}}`, `{"usage":nul}`,
}

// upstreamSeeds are the seeds that are a vLLM answer or chunk as sent, which the Granite
// reading's fast path must take.
var upstreamSeeds = func() []string {
	for i, s := range decodeSeeds {
		if strings.HasPrefix(s, `{"id":"cmpl-a1"`) {
			return decodeSeeds[i : i+5]
		}
	}
	panic("no Granite seeds")
}()

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
	for _, s := range upstreamSeeds {
		if !decodeCompletionChunkFast([]byte(s), &Completion{}) || !strings.Contains(s, "error") && !decodeCompletionTextFast([]byte(s), &Completion{}) {
			t.Errorf("the Granite reading's fast path gave up on %s", s)
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
	var mt textAnswer
	terr := json.Unmarshal(data, &mt)
	want, into := mt.completion(), Completion{}
	err = DecodeCompletionText(data, &into)
	if (err == nil) != (terr == nil) || err == nil && !reflect.DeepEqual(into, want) {
		t.Fatalf("DecodeCompletionText(%q) = %s, %v; encoding/json %s, %v", data, show(into), err, show(want), terr)
	}
	if fast := (Completion{}); decodeCompletionTextFast(data, &fast) && (terr != nil || !reflect.DeepEqual(fast, want)) {
		t.Fatalf("decodeCompletionTextFast(%q) = %s; encoding/json %s, %v", data, show(fast), show(want), terr)
	}
	var mk completionChunk
	kerr := json.Unmarshal(data, &mk)
	want = mk.completion()
	// Into a Completion that held another chunk: nothing of it may show through, but the empty
	// array of choices kept for none.
	into = Completion{}
	_ = DecodeCompletionChunk([]byte(`{"model":"m","choices":[{"index":1,"text":"t","finish_reason":"stop","stop_reason":"s"},{"index":2}],"usage":{},"error":1}`), &into)
	err = DecodeCompletionChunk(data, &into)
	if len(into.Choices) == 0 && len(want.Choices) == 0 {
		into.Choices = want.Choices
	}
	if (err == nil) != (kerr == nil) || err == nil && !reflect.DeepEqual(into, want) {
		t.Fatalf("DecodeCompletionChunk(%q) = %s, %v; encoding/json %s, %v", data, show(into), err, show(want), kerr)
	}
	if fast := (Completion{}); decodeCompletionChunkFast(data, &fast) && (kerr != nil || !reflect.DeepEqual(fast, want)) {
		t.Fatalf("decodeCompletionChunkFast(%q) = %s; encoding/json %s, %v", data, show(fast), show(want), kerr)
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

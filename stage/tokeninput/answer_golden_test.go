package tokeninput

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/tokenizer"
)

var update = flag.Bool("update", false, "rewrite testdata/answers.golden from the stage's output")

// goldenAnswers are upstream completions, whole and streamed, with what varies the chat
// answer's bytes: the fingerprint (absent, a string to re-escape, null, an object to compact),
// usage (the upstream's, with details it drops, or counted here), stop_reason, token ids, stop
// strings cut here, several choices, an error event, and member names encoding/json folds.
var goldenAnswers = []struct {
	name   string
	stream bool
	stop   []string
	usage  bool // include_usage
	n      int
	in     string
}{
	{"plain", false, nil, false, 1, `{"id":"cmpl-1","object":"text_completion","created":5,"model":"qwen","choices":[{"index":0,"text":"Hello <world> & ` + "\u2028" + `!","logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":1}}}`},
	{"fingerprint", false, nil, false, 1, `{"id":"x","created":1,"model":"m","system_fingerprint" : "fp_\u00e9<" ,"choices":[{"index":0,"text":"a","finish_reason":"length","stop_reason":151645}]}`},
	{"fingerprint null", false, nil, false, 1, `{"id":"chatcmpl-2","model":"m","system_fingerprint":null,"choices":[{"index":0,"text":"a\tb\"","finish_reason":null}],"usage":null}`},
	{"fingerprint object", false, nil, false, 1, `{"id":"","model":"m","system_fingerprint":{ "a" : [ 1, "<" ] },"choices":[{"index":0,"text":"x","finish_reason":"stop","stop_reason":"\u0041"}]}`},
	{"token ids", false, nil, false, 1, `{"id":"cmpl-3","model":"m","choices":[{"index":0,"text":"","token_ids":[9707,11,1879,0],"finish_reason":"length"}]}`},
	{"stop cut", false, []string{"END"}, false, 2, `{"id":"cmpl-4","model":"m","choices":[{"index":1,"text":"one END two","finish_reason":"length"},{"index":0,"text":"zero","finish_reason":"stop","stop_reason":"X"}],"usage":{"prompt_tokens":2,"completion_tokens":9,"total_tokens":11}}`},
	{"no choices", false, nil, false, 1, `{"id":"cmpl-5","model":"m","choices":[]}`},
	{"choices missing", false, nil, false, 1, `{"id":"cmpl-5","model":"m"}`},
	{"folded names", false, nil, false, 1, `{"ID":"cmpl-6","Model":"m","System_Fingerprint":"f","Choices":[{"Index":0,"TEXT":"t","Finish_Reason":"stop"}],"Usage":{"Prompt_Tokens":2,"completion_tokens":1}}`},
	{"duplicates", false, nil, false, 1, `{"id":"a","id":"cmpl-7","model":"m","choices":[{"index":0,"text":"t","finish_reason":"stop"}],"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2},"system_fingerprint":"a","system_fingerprint":null}`},
	{"bad index", false, nil, false, 1, `{"id":"x","choices":[{"index":"0","text":"a"}]}`},
	{"bad usage", false, nil, false, 1, `{"id":"x","choices":[{"index":0,"text":"a"}],"usage":{"prompt_tokens":1.5}}`},
	{"stream", true, nil, true, 1, "data: {\"id\":\"cmpl-s\",\"created\":9,\"model\":\"qwen\",\"system_fingerprint\":\"fp<1>\",\"choices\":[{\"index\":0,\"text\":\"Hello\",\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"cmpl-s\",\"created\":9,\"model\":\"qwen\",\"choices\":[{\"index\":0,\"text\":\" <w>\",\"finish_reason\":\"stop\",\"stop_reason\":null}]}\n\n" +
		"data: {\"id\":\"cmpl-s\",\"created\":9,\"model\":\"qwen\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":5,\"completion_tokens\":2,\"prompt_tokens_details\":null}}\n\ndata: [DONE]\n\n"},
	{"stream counted usage", true, nil, true, 2, "data: {\"id\":\"s2\",\"model\":\"m\",\"system_fingerprint\":null,\"choices\":[{\"index\":1,\"text\":\"b\"},{\"index\":0,\"token_ids\":[9707,11]}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"text\":\"\",\"token_ids\":[1879],\"finish_reason\":\"length\",\"stop_reason\":7},{\"index\":1,\"text\":\"c\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"},
	{"stream stop", true, []string{"END"}, false, 1, "data: {\"id\":\"cmpl-t\",\"model\":\"m\",\"system_fingerprint\":{ \"k\" : 1 },\"choices\":[{\"index\":0,\"text\":\"abc EN\"}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"text\":\"D more\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"ignored\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n"},
	{"stream held back", true, []string{"END"}, true, 1, "data: {\"id\":\"cmpl-u\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"abc EN\"}]}\n\ndata: [DONE]\n\n"},
	{"stream error", true, nil, false, 1, "data: {\"id\":\"e\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\ndata: {\"error\":{\"message\":\"boom <x>\"}}\n\ndata: [DONE]\n\n"},
	{"stream bad chunk", true, nil, true, 1, "data: {\"id\":\"b\",\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"token_ids\":[1.5]}]}\n\ndata: [DONE]\n\n"},
	{"stream folded", true, nil, true, 1, "data: {\"ID\":\"f\",\"Model\":\"m\",\"Choices\":[{\"Index\":0,\"Text\":\"a\",\"Finish_Reason\":\"stop\"}],\"Usage\":{\"Prompt_Tokens\":1}}\n\ndata: [DONE]\n\n"},
}

// TestAnswersGolden pins the bytes of the chat answers and chunks the stage makes of an
// upstream's completions (testdata/answers.golden; -update rewrites it). The tests that go
// through the SDK decode the answers, so nothing else holds their member order and escaping.
func TestAnswersGolden(t *testing.T) {
	tok, err := tokenizer.Load("../../lib/tokenizer/testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	for _, tc := range goldenAnswers {
		p := &params{stop: tc.stop, n: tc.n, includeUsage: tc.usage, promptLen: 4, tok: tok}
		body := pipeline.NewBody([]byte(tc.in), pipeline.Usage{Status: 200})
		var out []byte
		if tc.stream {
			s := newChatStream(body, p)
			out, err = io.ReadAll(s)
			u := s.Finish(nil)
			out = fmt.Appendf(out, "usage %d %d err %v", u.PromptTokens, u.CompletionTokens, err)
		} else {
			res, err := wholeAnswer(&pipeline.Response{Body: body}, p)
			if err != nil {
				out = fmt.Appendf(nil, "error %v", err)
			} else {
				out, err = io.ReadAll(res.Body)
				u := res.Body.Finish(nil)
				out = fmt.Appendf(out, "\nusage %d %d err %v", u.PromptTokens, u.CompletionTokens, err)
			}
		}
		fmt.Fprintf(&got, "=== %s\n%s\n\n", tc.name, out)
	}
	if want := golden(t, "answers.golden", got.Bytes(), *update); !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("the answers' bytes changed (go test -run TestAnswersGolden -update rewrites them):\n%s", got.Bytes())
	}
}

// golden is testdata/name's contents, after writing got to it when update is set.
func golden(t *testing.T, name string, got []byte, update bool) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

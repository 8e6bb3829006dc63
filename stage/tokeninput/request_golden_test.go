package tokeninput

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/bodyref"
	"github.com/infergate/infergate/lib/openaiwire"
	"github.com/infergate/infergate/lib/tokenizer"
	"github.com/infergate/infergate/stage/prompt"
)

var updateRequests = flag.Bool("update-requests", false, "rewrite testdata/requests.golden from the stage's output")

const goldenMessages = `"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}]`

// goldenRequests are client requests with what varies the body the stage sends upstream: the
// completion length (max_completion_tokens, max_tokens, both, null, repeated, spelled with
// escapes, with white space around), the chat-only members it drops, streaming, text and id
// prompts, and what it refuses.
var goldenRequests = []struct{ path, body string }{
	{chatPath, `{"model":"qwen",` + goldenMessages + `}`},
	{chatPath, `{"model":"qwen",` + goldenMessages + `,"max_completion_tokens":5,"max_tokens":9,"stream":true,"stream_options":{"include_usage":true},"stop":"END","n":2,"user":"u","seed":1,"logprobs":false,"top_logprobs":null}`},
	{chatPath, `{"model":"qwen",` + goldenMessages + `,"max_completion_tokens":null,"max_tokens":7,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto","parallel_tool_calls":true}`},
	{chatPath, `{"model":"qwen",` + goldenMessages + `,"max_tokens":null,"metadata":{"a":"b"},"store":false,"reasoning_effort":"low","chat_template_kwargs":{"enable_thinking":false}}`},
	{chatPath, `{"model":"qwen",` + goldenMessages + `,"max_tokens":1,"max_tokens":3,"m\u0061x_completion_tokens":4,"Max_Tokens":8}`},
	{chatPath, "{ \"model\" : \"qwen\" ,\n" + goldenMessages + " , \"max_tokens\" : 9 , \"temperature\" : 0.5 , \"\\u00e9\" : [ 1 ] }"},
	{chatPath, `{"model":"qwen",` + goldenMessages + `,"add_special_tokens":true,"add_generation_prompt":true,"echo":true,"suffix":"s","best_of":1,"prompt":"dropped?"}`},
	{chatPath, `{"model":"qwen",` + goldenMessages + `,"logprobs":true}`},
	{chatPath, `{"model":"qwen",` + goldenMessages + `,"continue_final_message":true}`},
	{chatPath, `{"model":"qwen",` + goldenMessages + `,"n":0}`},
	{chatPath, `{"model":"qwen",` + goldenMessages + `,"stop":3}`},
	{chatPath, `{"model":"qwen","messages":[{"role":"wizard","content":"x"}]}`},
	{completionPath, `{"model":"qwen","prompt":"Once upon a time","max_tokens":2,"echo":false,"suffix":null,"best_of":1,"logprobs":2}`},
	{completionPath, `{"model":"qwen","prompt":["a","b c"],"max_completion_tokens":3,"stream":true}`},
	{completionPath, `{"model":"qwen","prompt":[1,2,3],"max_tokens":null,"user":"x"}`},
	{completionPath, `{"model":"qwen","prompt":[[1,2],[3]],"max_completion_tokens":null}`},
	{completionPath, `{"model":"qwen","prompt":{"x":1}}`},
	{completionPath, `{"model":"qwen"}`},
}

// TestRequestsGolden pins the requests the stage sends upstream (path, body bytes, routing, the
// prompt's ids) for goldenRequests, as they come from the client and as an earlier stage left
// them edited (a member set through the request's view), and for the bodies of the tree's request
// corpora on both paths; and checks that the client's request is left as it was. The golden
// file was recorded from the stage that rewrote the body with EditBody and SetBody
// (-update-requests rewrites it).
func TestRequestsGolden(t *testing.T) {
	tok, err := tokenizer.Load("../../lib/tokenizer/testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	m, err := prompt.New("qwen", tok, prompt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	run := func(name, path string, body []byte, edit bool) {
		req, err := pipeline.NewRequest(path, body)
		if err != nil {
			return
		}
		if edit {
			if err := req.Edit(func(b *openaiwire.Body) error { b.Set("x_earlier", []byte(`{"k":1}`)); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		client := string(req.Body())
		var sent *pipeline.Request
		next := func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			sent = r
			return &pipeline.Response{StatusCode: 500, Body: pipeline.NewBody([]byte(`{}`), pipeline.Usage{})}, nil
		}
		_, err = Stage(m)(next)(context.Background(), req)
		fmt.Fprintf(&got, "=== %s %s edited=%v\n", name, path, edit)
		var pe *pipeline.Error
		switch {
		case errors.As(err, &pe):
			fmt.Fprintf(&got, "error %d %s %s: %s\n", pe.Status, pe.Param, pe.Code, pe.Message)
		case err != nil:
			fmt.Fprintf(&got, "error %v\n", err)
		case sent == nil:
			fmt.Fprintf(&got, "not sent\n")
		default:
			rt := sent.Routing()
			out := sent.Body()
			sum := sha256.Sum256(out)
			fmt.Fprintf(&got, "%s model=%s stream=%v max=%d ids=%d sha=%x\n", sent.Path, rt.Model, rt.Stream, rt.MaxTokens, len(sent.PromptTokens), sum[:8])
			if len(out) < 600 {
				fmt.Fprintf(&got, "%s\n", out)
			}
			if sent == req {
				t.Errorf("%s: the client's request itself went upstream", name)
			}
		}
		if string(req.Body()) != client || req.Path != path {
			t.Errorf("%s %s: the client's request changed: %s %s", name, path, req.Path, req.Body())
		}
	}
	for i, c := range goldenRequests {
		for _, edit := range []bool{false, true} {
			run(fmt.Sprint("case ", i), c.path, []byte(c.body), edit)
		}
	}
	seeds, err := bodyref.Seeds(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range seeds {
		sum := sha256.Sum256(body)
		for _, path := range []string{chatPath, completionPath} {
			run(fmt.Sprintf("corpus %x", sum[:8]), path, body, false)
		}
	}
	const file = "testdata/requests.golden"
	want := golden(t, "requests.golden", got.Bytes(), *updateRequests)
	// Compared a request at a time: a body new to the corpora is logged, not failed.
	wantBy := map[string]string{}
	for _, sec := range sections(want) {
		wantBy[sec[0]] = sec[1]
	}
	checked := 0
	for _, sec := range sections(got.Bytes()) {
		w, ok := wantBy[sec[0]]
		switch {
		case !ok:
			t.Logf("not in %s (-update-requests records it): %s\n%s", file, sec[0], sec[1])
		case w != sec[1]:
			t.Errorf("the request sent upstream changed (-update-requests rewrites %s): %s\n got %s\nwant %s", file, sec[0], sec[1], w)
		default:
			checked++
		}
	}
	if checked < len(wantBy)*9/10 {
		t.Errorf("%d of %s's %d requests checked: its bodies are gone from the corpora", checked, file, len(wantBy))
	}
}

// sections splits a golden file into its requests: each "=== " line and the lines after it.
func sections(b []byte) [][2]string {
	var out [][2]string
	for _, part := range bytes.Split(b, []byte("=== "))[1:] {
		head, rest, _ := bytes.Cut(part, []byte("\n"))
		out = append(out, [2]string{string(head), string(rest)})
	}
	return out
}

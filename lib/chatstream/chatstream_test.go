package chatstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// vllmChat is a chat stream as vLLM sends it with include_usage: role first, content a token at
// a time, the finish_reason in its own chunk, then the usage chunk.
var vllmChat = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":", wörld"},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}`,
}

func assemble(t testing.TB, path string, events []string) ([]byte, bool) {
	t.Helper()
	a := NewAssembler(path, 0)
	for _, e := range events {
		if err := a.Add([]byte(e)); err != nil {
			t.Fatalf("Add(%s): %v", e, err)
		}
	}
	return a.Result()
}

func TestAssembleChat(t *testing.T) {
	got, ok := assemble(t, ChatPath, vllmChat)
	if !ok {
		t.Fatalf("a whole stream is reported incomplete: %s", got)
	}
	want := `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello, wörld!"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}`
	if string(got) != want {
		t.Fatalf("assembled\n%s\nwant\n%s", got, want)
	}
}

func TestAssembleIncomplete(t *testing.T) {
	// The stream stopped before the finish_reason: not whole.
	got, ok := assemble(t, ChatPath, vllmChat[:3])
	if ok {
		t.Fatalf("a stream without its finish_reason is reported whole: %s", got)
	}
	if !strings.Contains(string(got), `"content":"Hello, wörld"`) {
		t.Fatalf("the partial answer is not assembled: %s", got)
	}
	// Choice 1 finished, choice 0 never came.
	a := NewAssembler(ChatPath, 0)
	if err := a.Add([]byte(`{"choices":[{"index":1,"delta":{"content":"x"},"finish_reason":"stop"}]}`)); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Result(); ok {
		t.Fatal("a stream missing choice 0 is reported whole")
	}
	if _, ok := NewAssembler(ChatPath, 0).Result(); ok {
		t.Fatal("an empty stream is reported whole")
	}
}

func TestAssembleToolCalls(t *testing.T) {
	events := []string{
		`{"id":"c","model":"m","created":1,"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
		`{"id":"c","model":"m","created":1,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`,
		`{"id":"c","model":"m","created":1,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`,
		`{"id":"c","model":"m","created":1,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	}
	got, ok := assemble(t, ChatPath, events)
	want := `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"logprobs":null,"finish_reason":"tool_calls"}]}`
	if !ok || string(got) != want {
		t.Fatalf("assembled (ok %v)\n%s\nwant\n%s", ok, got, want)
	}
}

func TestAssembleCompletion(t *testing.T) {
	events := []string{
		`{"id":"cmpl-1","object":"text_completion","created":2,"model":"m","choices":[{"index":0,"text":" The","logprobs":null,"finish_reason":null}]}`,
		`{"id":"cmpl-1","object":"text_completion","created":2,"model":"m","choices":[{"index":1,"text":" A","logprobs":null,"finish_reason":null}]}`,
		`{"id":"cmpl-1","object":"text_completion","created":2,"model":"m","choices":[{"index":0,"text":" end","logprobs":null,"finish_reason":"length"}]}`,
		`{"id":"cmpl-1","object":"text_completion","created":2,"model":"m","choices":[{"index":1,"text":".","logprobs":null,"finish_reason":"stop"}]}`,
	}
	got, ok := assemble(t, CompletionPath, events)
	want := `{"id":"cmpl-1","object":"text_completion","created":2,"model":"m","choices":[{"index":0,"text":" The end","logprobs":null,"finish_reason":"length"},{"index":1,"text":" A.","logprobs":null,"finish_reason":"stop"}]}`
	if !ok || string(got) != want {
		t.Fatalf("assembled (ok %v)\n%s\nwant\n%s", ok, got, want)
	}
}

func TestAssembleBounds(t *testing.T) {
	a := NewAssembler(ChatPath, 8)
	if err := a.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"12345"}}]}`)); err != nil {
		t.Fatal(err)
	}
	err := a.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"6789"}}]}`))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the bound: %v, want ErrTooLarge", err)
	}
	if err := a.Add([]byte(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)); err == nil {
		t.Fatal("an Assembler past its bound takes more events")
	}
	if _, ok := a.Result(); ok {
		t.Fatal("an answer past the bound is reported whole")
	}
	for _, bad := range []string{
		`{"choices":[{"index":128,"delta":{"content":"x"}}]}`,
		`{"choices":[{"index":-1,"delta":{"content":"x"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1000000}]}}]}`,
		`not json`,
	} {
		if err := NewAssembler(ChatPath, 0).Add([]byte(bad)); err == nil {
			t.Errorf("Add(%s) took it", bad)
		}
	}
}

func TestPieces(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"Hello, world!", []string{"Hello,", " world!"}},
		{"  two  spaces\nnext", []string{"  two", "  spaces", "\nnext"}},
		{"abcdefghijklmnopqrstuvwxyz", []string{"abcdefghijklmnop", "qrstuvwxyz"}},
		{"日本語のテキストです", []string{"日本語のテキ", "ストです"}},
	} {
		got := pieces(tc.in)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("pieces(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestReplayRoundTrip: a replayed stream, assembled again, is the stored response (with the
// replay's id and created), and it reads like a model's stream: role first, then word-sized
// pieces, the finish_reason last, the usage chunk when asked.
func TestReplayRoundTrip(t *testing.T) {
	stored, _ := assemble(t, ChatPath, vllmChat)
	events, err := Replay(ChatPath, stored, ReplayOptions{ID: "chatcmpl-new", Created: 42, IncludeUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"id":"chatcmpl-new","object":"chat.completion.chunk","created":42,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-new","object":"chat.completion.chunk","created":42,"model":"m","choices":[{"index":0,"delta":{"content":"Hello,"},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-new","object":"chat.completion.chunk","created":42,"model":"m","choices":[{"index":0,"delta":{"content":" wörld!"},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-new","object":"chat.completion.chunk","created":42,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`,
		`{"id":"chatcmpl-new","object":"chat.completion.chunk","created":42,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}`,
	}
	var got []string
	for _, e := range events {
		got = append(got, string(e))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("replayed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	again, ok := assemble(t, ChatPath, got)
	wantAgain := bytes.Replace(bytes.Replace(stored, []byte(`"chatcmpl-1"`), []byte(`"chatcmpl-new"`), 1), []byte(`1700000000`), []byte(`42`), 1)
	if !ok || !bytes.Equal(again, wantAgain) {
		t.Fatalf("replay then assemble (ok %v)\n%s\nwant\n%s", ok, again, wantAgain)
	}
	// Without include_usage there is no usage chunk.
	events, _ = Replay(ChatPath, stored, ReplayOptions{ID: "x"})
	if bytes.Contains(events[len(events)-1], []byte("usage")) {
		t.Fatalf("a usage chunk nobody asked for: %s", events[len(events)-1])
	}
	if _, err := Replay(ChatPath, []byte(`{"choices":[]}`), ReplayOptions{}); err == nil {
		t.Fatal("Replay of a response without choices succeeded")
	}
}

// FuzzAssemble: any events, read one per line, never panic the Assembler, and an answer it
// calls whole replays and reassembles to itself.
func FuzzAssemble(f *testing.F) {
	f.Add(strings.Join(vllmChat, "\n"), false)
	f.Add(`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`, false)
	f.Add(`{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"think","content":" a  b"},"finish_reason":"stop"}]}`, false)
	f.Add(`{"id":"c","choices":[{"index":0,"text":" a b\tc","finish_reason":"length"}]}`, true)
	f.Fuzz(func(t *testing.T, events string, completion bool) {
		path := ChatPath
		if completion {
			path = CompletionPath
		}
		a := NewAssembler(path, 1<<16)
		for _, e := range strings.Split(events, "\n") {
			if a.Add([]byte(e)) != nil {
				break
			}
		}
		resp, ok := a.Result()
		if !ok {
			return
		}
		if !json.Valid(resp) {
			t.Fatalf("whole but not JSON: %s", resp)
		}
		replayed, err := Replay(path, resp, ReplayOptions{IncludeUsage: true})
		if err != nil {
			t.Fatalf("Replay of an assembled answer: %v\n%s", err, resp)
		}
		b := NewAssembler(path, 1<<16)
		for _, e := range replayed {
			if err := b.Add(e); err != nil {
				t.Fatalf("reassembling %s: %v", e, err)
			}
		}
		again, ok := b.Result()
		norm := func(r []byte) string { // the replay's id and created are its own
			var m map[string]any
			_ = json.Unmarshal(r, &m)
			delete(m, "id")
			delete(m, "created")
			out, _ := json.Marshal(m)
			return string(out)
		}
		if !ok || norm(again) != norm(resp) {
			t.Fatalf("replay then assemble (ok %v)\n%s\nwant\n%s", ok, again, resp)
		}
	})
}

func TestReplayStopReason(t *testing.T) {
	stored := `{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"a","logprobs":null,"finish_reason":"stop","stop_reason":"###"}]}`
	events, err := Replay(CompletionPath, []byte(stored), ReplayOptions{ID: "c", Created: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := assemble(t, CompletionPath, func() (s []string) {
		for _, e := range events {
			s = append(s, string(e))
		}
		return s
	}())
	if !ok || string(got) != stored {
		t.Fatalf("replay then assemble\n%s\nwant\n%s", got, stored)
	}
}

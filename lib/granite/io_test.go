package granite

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// fakeBackend records the calls and answers with canned texts.
type fakeBackend struct {
	calls   []GenerateRequest
	answers []string
	err     error
}

func (f *fakeBackend) Generate(_ context.Context, req GenerateRequest) ([]Generation, error) {
	f.calls = append(f.calls, req)
	if f.err != nil {
		return nil, f.err
	}
	out := make([]Generation, len(f.answers))
	for i, a := range f.answers {
		out[i] = Generation{Text: a, StopReason: "stop"}
	}
	return out, nil
}

func TestSimpleIOProcessor(t *testing.T) {
	t.Parallel()
	reg := NewDefaultRegistry(fixedClock("April 01, 2025"))
	b := &fakeBackend{answers: []string{"<think>A</think><response>B</response>", "no markers"}}
	io, err := reg.IOProcessor("granite3.3:8b", b)
	if err != nil {
		t.Fatal(err)
	}
	req := &ChatRequest{Messages: []Message{{Role: RoleUser, Content: sellerQ}}, Thinking: true, Params: map[string]any{"n": 2}}
	res, err := io.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.calls) != 1 {
		t.Fatalf("%d backend calls", len(b.calls))
	}
	want := strings.ReplaceAll(readFile(t, "g33", "in", "test_reasoning_prompt.txt"), "March 18, 2025", "April 01, 2025")
	assertSame(t, b.calls[0].Prompt, want)
	if b.calls[0].Params["n"] != 2 || b.calls[0].Params["skip_special_tokens"] != nil {
		t.Errorf("params %v", b.calls[0].Params)
	}
	if len(res) != 2 || reasoning(res[0].NextMessage) != "A" || res[0].NextMessage.Content != "B" || res[1].NextMessage.Content != "no markers" {
		t.Errorf("results %+v", res)
	}

	// 3.3 with citations keeps special tokens on vLLM; the caller's params are not touched.
	req = &ChatRequest{Messages: []Message{{Role: RoleUser, Content: "q"}}, Controls: &Controls{Citations: true}, Params: map[string]any{"max_tokens": 5}}
	if _, err := io.Chat(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if p := b.calls[1].Params; p["skip_special_tokens"] != false || p["max_tokens"] != 5 {
		t.Errorf("params %v", p)
	}
	if _, ok := req.Params["skip_special_tokens"]; ok {
		t.Error("caller's params changed")
	}

	// A request granite-io rejects never reaches the backend.
	_, err = io.Chat(context.Background(), &ChatRequest{Messages: []Message{{Role: RoleUser, Content: "q"}}, Thinking: true, Tools: []FunctionDefinition{{Name: "f"}}})
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Rule != "thinking_with_tools" || len(b.calls) != 2 {
		t.Errorf("err %v, %d calls", err, len(b.calls))
	}

	b.err = errors.New("upstream down")
	if _, err := io.Chat(context.Background(), &ChatRequest{Messages: []Message{{Role: RoleUser, Content: "q"}}}); !errors.Is(err, b.err) {
		t.Errorf("backend error not wrapped: %v", err)
	}
}

func TestRegistryNames(t *testing.T) {
	t.Parallel()
	reg := NewDefaultRegistry()
	for _, want := range []Version{V32, V33} {
		for _, n := range want.Names() {
			e, ok := reg.Lookup(n)
			if !ok || e.Input.(*Processor).Version() != want {
				t.Errorf("%q: %v %v", n, ok, e)
			}
		}
	}
	if _, ok := reg.Lookup("GRANITE3.2"); ok {
		t.Error("lookup is case-insensitive; granite-io's is exact")
	}
	if _, err := reg.IOProcessor("granite4", &fakeBackend{}); err == nil {
		t.Error("unknown name accepted")
	}
	if len(reg.Names()) != len(V32.Names())+len(V33.Names()) {
		t.Errorf("names %v", reg.Names())
	}
	p := New(V32)
	if err := reg.Register(Entry{Input: p, Output: p}, "mine", "granite3.3"); err == nil {
		t.Error("duplicate alias accepted")
	}
	if _, ok := reg.Lookup("mine"); ok {
		t.Error("a failed Register left a name behind")
	}
	if err := reg.Register(Entry{Input: p}, "half"); err == nil {
		t.Error("entry without output processor accepted")
	}
	if err := reg.Register(Entry{Input: p, Output: p}, "x", "x"); err == nil {
		t.Error("repeated alias accepted")
	}
}

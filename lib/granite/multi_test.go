package granite

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// countingBackend answers each call with the next answers of a list (cycling), at most perCall
// of them and no more than the call's n, and records each call.
type countingBackend struct {
	answers []string
	perCall int
	next    int
	calls   []GenerateRequest
	answer  func(prompt string) string // overrides answers when set
}

func (c *countingBackend) Generate(_ context.Context, req GenerateRequest) ([]Generation, error) {
	c.calls = append(c.calls, req)
	if c.answer != nil {
		return []Generation{{Text: c.answer(req.Prompt), StopReason: "stop"}}, nil
	}
	n, err := completions(req.Params)
	if err != nil {
		return nil, err
	}
	n = min(n, c.perCall)
	out := make([]Generation, n)
	for i := range out {
		out[i] = Generation{Text: c.answers[c.next%len(c.answers)]}
		c.next++
	}
	return out, nil
}

func TestMajorityVoting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := NewDefaultRegistry()
	e, _ := reg.Lookup("granite3.3")
	ask := func(params map[string]any) *ChatRequest {
		return &ChatRequest{Messages: []Message{{Role: RoleUser, Content: "6*7?"}}, Params: params}
	}

	// Five samples, two per call: three calls asking for what is still missing.
	b := &countingBackend{answers: []string{"42", "41", " 42 ", "+42", "x"}, perCall: 2}
	v := NewMajorityVoting(NewSimple(e.Input, e.Output, b), IntegerNormalizer, 5)
	params := map[string]any{"temperature": 0.7}
	res, err := v.Chat(ctx, ask(params))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.calls) != 3 || b.calls[0].Params["n"] != 5 || b.calls[1].Params["n"] != 3 || b.calls[2].Params["n"] != 1 || b.calls[2].Params["temperature"] != 0.7 {
		t.Errorf("calls %+v", b.calls)
	}
	if _, ok := params["n"]; ok {
		t.Error("the caller's params changed")
	}
	if len(res) != 1 || res[0].NextMessage.Content != "42" || res[0].Votes != 3 {
		t.Errorf("result %+v", res)
	}

	// n=2 as the stage passes it (a JSON number): the two largest groups, largest first.
	b = &countingBackend{answers: []string{"1", "2", "2", "3", "2", "1"}, perCall: 100}
	res, err = NewMajorityVoting(NewSimple(e.Input, e.Output, b), nil, 3).Chat(ctx, ask(map[string]any{"n": json.RawMessage("2")}))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.calls) != 1 || len(res) != 2 || res[0].NextMessage.Content != "2" || res[0].Votes != 3 || res[1].NextMessage.Content != "1" || res[1].Votes != 2 {
		t.Errorf("%d calls, results %+v", len(b.calls), res)
	}

	// A tie goes to the group seen last, as granite-io's descending sort on the first index does.
	b = &countingBackend{answers: []string{"a", "b"}, perCall: 100}
	res, err = NewMajorityVoting(NewSimple(e.Input, e.Output, b), nil, 2).Chat(ctx, ask(nil))
	if err != nil || len(res) != 1 || res[0].NextMessage.Content != "b" || res[0].Votes != 1 {
		t.Errorf("tie: %v %+v", err, res)
	}

	// Bad n and too many samples are refused before any call.
	b = &countingBackend{answers: []string{"a"}, perCall: 1}
	var ve *ValidationError
	for _, tc := range []struct {
		params  map[string]any
		samples int
		rule    string
	}{
		{map[string]any{"n": 0}, 1, "invalid_n"},
		{map[string]any{"n": -1}, 1, "invalid_n"},
		{map[string]any{"n": 1.5}, 1, "invalid_n"},
		{map[string]any{"n": json.RawMessage(`"2"`)}, 1, "invalid_n"},
		{map[string]any{"n": 11}, 100, "too_many_samples"},
	} {
		_, err := NewMajorityVoting(NewSimple(e.Input, e.Output, b), nil, tc.samples).Chat(ctx, ask(tc.params))
		if !errors.As(err, &ve) || ve.Rule != tc.rule {
			t.Errorf("%v: %v", tc.params, err)
		}
	}
	if len(b.calls) != 0 {
		t.Errorf("%d calls for refused requests", len(b.calls))
	}

	// A backend with no answers, a broken normalizer.
	b = &countingBackend{answers: []string{"a"}, perCall: 0}
	if _, err := NewMajorityVoting(NewSimple(e.Input, e.Output, b), nil, 4).Chat(ctx, ask(nil)); err == nil || len(b.calls) != 1 {
		t.Errorf("no samples: %v after %d calls", err, len(b.calls))
	}
	b = &countingBackend{answers: []string{"a"}, perCall: 9}
	if _, err := NewMajorityVoting(NewSimple(e.Input, e.Output, b), func([]string) []string { return nil }, 4).Chat(ctx, ask(nil)); err == nil {
		t.Error("normalizer with too few forms accepted")
	}
}

func TestVotingEntry(t *testing.T) {
	t.Parallel()
	reg := NewDefaultRegistry()
	e, _ := reg.Lookup("granite3.2")
	if err := reg.Register(Voting(e, IntegerNormalizer, 3), "granite3.2+vote"); err != nil {
		t.Fatal(err)
	}
	b := &countingBackend{answers: []string{"1", "2", "2"}, perCall: 9}
	io, err := reg.IOProcessor("granite3.2+vote", b)
	if err != nil {
		t.Fatal(err)
	}
	res, err := io.Chat(context.Background(), &ChatRequest{Messages: []Message{{Role: RoleUser, Content: "q"}}})
	if err != nil || len(res) != 1 || res[0].NextMessage.Content != "2" || res[0].Votes != 2 || len(b.calls) != 1 {
		t.Errorf("%v %+v, %d calls", err, res, len(b.calls))
	}
}

func TestIntegerNormalizer(t *testing.T) {
	t.Parallel()
	in := []string{"42", " -7\n", "+3", "1_000", "4.0", "x", "", "_1", "1__0", "99999999999999999999"}
	want := []string{"42", "-7", "3", "1000", "nan", "nan", "nan", "nan", "nan", "nan"}
	got := IntegerNormalizer(in)
	for i := range in {
		if got[i] != want[i] {
			t.Errorf("%q: %q, want %q", in[i], got[i], want[i])
		}
	}
}

func TestSequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := NewDefaultRegistry()
	e, _ := reg.Lookup("granite3.3")
	b := &countingBackend{answer: func(prompt string) string {
		if strings.Contains(prompt, "Rewrite as a standalone question") {
			return "  What is the capital of France?"
		}
		return "Paris."
	}}
	rewrite := Step{IO: NewSimple(e.Input, e.Output, b), Prepare: func(in *ChatRequest, _ []Result) (*ChatRequest, error) {
		last := in.Messages[len(in.Messages)-1].Content
		return &ChatRequest{Messages: []Message{{Role: RoleUser, Content: "Rewrite as a standalone question: " + last}}}, nil
	}}
	answer := Step{IO: NewSimple(e.Input, e.Output, b)}
	req := &ChatRequest{
		Messages:  []Message{{Role: RoleUser, Content: "Tell me about France."}, {Role: RoleAssistant, Content: "A country."}, {Role: RoleUser, Content: "Its capital?"}},
		Documents: []Document{{Text: "Paris is the capital of France.", DocID: &DocID{S: "1"}}},
	}
	res, err := NewSequence(rewrite, answer).Chat(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.calls) != 2 || len(res) != 1 || res[0].NextMessage.Content != "Paris." {
		t.Fatalf("%d calls, %+v", len(b.calls), res)
	}
	second := b.calls[1].Prompt
	if !strings.Contains(second, "<|start_of_role|>user<|end_of_role|>What is the capital of France?<|end_of_text|>") ||
		!strings.Contains(second, "Paris is the capital of France.") || strings.Contains(second, "Its capital?") {
		t.Errorf("second prompt %q", second)
	}
	if req.Messages[2].Content != "Its capital?" {
		t.Error("the caller's messages changed")
	}

	// A failing step ends the chain, naming the step.
	failing := Step{IO: NewSimple(e.Input, e.Output, &fakeBackend{err: errors.New("down")})}
	_, err = NewSequence(rewrite, failing, answer).Chat(ctx, req)
	if err == nil || !strings.Contains(err.Error(), "step 1") || len(b.calls) != 3 {
		t.Errorf("err %v, %d calls", err, len(b.calls))
	}
	if _, err := ReplaceLastUser(&ChatRequest{Messages: []Message{{Role: RoleSystem}}}, []Result{{}}); err == nil {
		t.Error("no user message accepted")
	}
}

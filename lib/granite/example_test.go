package granite_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/infergate/infergate/lib/granite"
)

// shouting is a user's own processor: a prompt format of its own and an output processor that
// upper-cases the answer. Any type with Render and Parse will do.
type shouting struct{}

func (shouting) Render(req *granite.ChatRequest, gen bool) (string, error) {
	var b strings.Builder
	for _, m := range req.Messages {
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Content)
	}
	if gen {
		b.WriteString("assistant:")
	}
	return b.String(), nil
}

func (shouting) Parse(gens []granite.Generation, _ *granite.ChatRequest) []granite.Result {
	out := make([]granite.Result, len(gens))
	for i, g := range gens {
		out[i].NextMessage = granite.AssistantMessage{Role: "assistant", Content: strings.ToUpper(strings.TrimSpace(g.Text)), Raw: g.Text}
	}
	return out
}

// echo is a Backend that answers with the end of the prompt it got; the gateway's Backend
// sends the prompt to a /v1/completions upstream instead.
type echo struct{}

func (echo) Generate(_ context.Context, req granite.GenerateRequest) ([]granite.Generation, error) {
	return []granite.Generation{{Text: " echo of " + fmt.Sprint(len(req.Prompt)) + " bytes "}}, nil
}

func ExampleRegistry() {
	reg := granite.NewDefaultRegistry() // Granite 3.2 and 3.3 under granite-io's names
	if err := reg.Register(granite.Entry{Input: shouting{}, Output: shouting{}}, "shouting", "shouting:1b"); err != nil {
		panic(err)
	}
	io, err := reg.IOProcessor("shouting:1b", echo{})
	if err != nil {
		panic(err)
	}
	res, err := io.Chat(context.Background(), &granite.ChatRequest{
		Messages: []granite.Message{{Role: "user", Content: "hi"}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res[0].NextMessage.Content)
	_, ok := reg.Lookup("ibm-granite/granite-3.3-8b-instruct")
	fmt.Println(ok)
	// Output:
	// ECHO OF 19 BYTES
	// true
}

package granite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MaxSamples bounds the completions one majority vote asks for (samples per completion times
// the request's n), so a client's n cannot multiply into unbounded upstream work.
const MaxSamples = 1024

// Normalizer maps sample answers to the forms they are grouped by (granite-io's normalizer
// callables); it returns one form per answer.
type Normalizer func(answers []string) []string

// IntegerNormalizer is granite-io's integer_normalizer: each answer read as an integer (Python's
// int(): surrounding whitespace, a sign and digit-separating underscores allowed) in decimal, or
// "nan" when it is not one.
func IntegerNormalizer(answers []string) []string {
	out := make([]string, len(answers))
	for i, a := range answers {
		out[i] = "nan"
		s := pyStrip(a)
		if strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.Contains(s, "__") {
			continue
		}
		if n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64); err == nil {
			out[i] = strconv.FormatInt(n, 10)
		}
	}
	return out
}

// MajorityVoting is granite-io's MajorityVotingProcessor: it asks its generator for
// samples-per-completion times the request's n completions, groups the parsed answers by their
// normalized form, and returns the first sample of each of the n largest groups, with Votes set
// to the group's size. Ties go as granite-io's pandas sort sends them: the group whose first
// sample came later wins.
//
// granite-io makes one call with n set to the sample count and fails when a provider returns
// fewer choices; this one calls again for the rest (one call per missing sample at most), so a
// backend that ignores n still gets its vote.
type MajorityVoting struct {
	gen     IOProcessor
	norm    Normalizer
	samples int
}

// NewMajorityVoting votes over gen's results. norm nil groups answers by their content with
// surrounding whitespace stripped; samples < 1 is granite-io's default, 100.
func NewMajorityVoting(gen IOProcessor, norm Normalizer, samples int) *MajorityVoting {
	if samples < 1 {
		samples = 100
	}
	if norm == nil {
		norm = func(a []string) []string {
			out := make([]string, len(a))
			for i, s := range a {
				out[i] = pyStrip(s)
			}
			return out
		}
	}
	return &MajorityVoting{gen: gen, norm: norm, samples: samples}
}

// Chat samples, votes and returns min(n, number of distinct answers) results.
func (m *MajorityVoting) Chat(ctx context.Context, req *ChatRequest) ([]Result, error) {
	n, err := completions(req.Params)
	if err != nil {
		return nil, err
	}
	want := m.samples * n
	if want > MaxSamples || want/n != m.samples {
		return nil, invalid("too_many_samples", "majority voting over %d samples per completion times n=%d is over %d samples", m.samples, n, MaxSamples)
	}
	var samples []Result
	for calls := 0; len(samples) < want && calls < want; calls++ {
		sub := *req
		sub.Params = maps.Clone(req.Params)
		if sub.Params == nil {
			sub.Params = map[string]any{}
		}
		sub.Params["n"] = want - len(samples)
		got, err := m.gen.Chat(ctx, &sub)
		if err != nil {
			return nil, err
		}
		if len(got) == 0 {
			break
		}
		samples = append(samples, got[:min(len(got), want-len(samples))]...)
	}
	if len(samples) == 0 {
		return nil, errors.New("granite: majority voting: the generator returned no samples")
	}
	answers := make([]string, len(samples))
	for i, s := range samples {
		answers[i] = s.NextMessage.Content
	}
	forms := m.norm(answers)
	if len(forms) != len(answers) {
		return nil, fmt.Errorf("granite: majority voting: the normalizer returned %d forms for %d answers", len(forms), len(answers))
	}
	type group struct{ first, count int }
	byForm := map[string]*group{}
	var groups []*group
	for i, f := range forms {
		g, ok := byForm[f]
		if !ok {
			g = &group{first: i}
			byForm[f] = g
			groups = append(groups, g)
		}
		g.count++
	}
	slices.SortFunc(groups, func(a, b *group) int {
		if a.count != b.count {
			return b.count - a.count
		}
		return b.first - a.first
	})
	out := make([]Result, min(n, len(groups)))
	for i := range out {
		out[i] = samples[groups[i].first]
		out[i].Votes = groups[i].count
	}
	return out, nil
}

// completions reads the request's n (default 1), as a number or a JSON number.
func completions(params map[string]any) (int, error) {
	v, ok := params["n"]
	if !ok || v == nil {
		return 1, nil
	}
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case float64:
		n = int64(x)
		if float64(n) != x {
			n = 0
		}
	case json.Number:
		n, _ = x.Int64()
	case json.RawMessage:
		if string(x) == "null" {
			return 1, nil
		}
		if json.Unmarshal(x, &n) != nil {
			n = 0
		}
	}
	if n < 1 || n > MaxSamples {
		// granite-io's backends say "Invalid value for n (N)".
		return 0, invalid("invalid_n", "Invalid value for n (%v)", v)
	}
	return int(n), nil
}

// Step is one call of a Sequence: an IO processor and how its request is made.
type Step struct {
	IO IOProcessor
	// Prepare builds the step's request from the sequence's request and the previous step's
	// results (nil for the first step). Nil: the first step gets the sequence's request, a later
	// step ReplaceLastUser's.
	Prepare func(in *ChatRequest, prev []Result) (*ChatRequest, error)
}

// Sequence is a chain of IO processors in which each step's output feeds the next step's input
// (granite-io's composite processors, such as a query rewrite before a RAG answer). It returns
// the last step's results.
type Sequence struct{ steps []Step }

// NewSequence chains steps, run in order.
func NewSequence(steps ...Step) *Sequence { return &Sequence{steps: slices.Clone(steps)} }

// Chat runs the steps; an error in any step ends the chain with that error.
func (s *Sequence) Chat(ctx context.Context, req *ChatRequest) ([]Result, error) {
	var prev []Result
	for i, st := range s.steps {
		next := req
		switch {
		case st.Prepare != nil:
			var err error
			if next, err = st.Prepare(req, prev); err != nil {
				return nil, fmt.Errorf("granite: sequence step %d: %w", i, err)
			}
		case i > 0:
			var err error
			if next, err = ReplaceLastUser(req, prev); err != nil {
				return nil, fmt.Errorf("granite: sequence step %d: %w", i, err)
			}
		}
		res, err := st.IO.Chat(ctx, next)
		if err != nil {
			return nil, fmt.Errorf("granite: sequence step %d: %w", i, err)
		}
		prev = res
	}
	return prev, nil
}

// ReplaceLastUser is a Step.Prepare that asks the sequence's request again with its last user
// message replaced by the previous step's first answer, whitespace stripped (a rewritten
// question). The request is copied; its messages are not changed.
func ReplaceLastUser(in *ChatRequest, prev []Result) (*ChatRequest, error) {
	if len(prev) == 0 {
		return nil, errors.New("the previous step returned no result")
	}
	out := *in
	out.Messages = slices.Clone(in.Messages)
	for i := len(out.Messages) - 1; i >= 0; i-- {
		if out.Messages[i].Role == RoleUser {
			out.Messages[i].Content = pyStrip(prev[0].NextMessage.Content)
			return &out, nil
		}
	}
	return nil, errors.New("the request has no user message to replace")
}

// Voting returns e with an IO processor that votes (MajorityVoting) over e's own IO processor;
// register it under a name of its own to serve a model that way.
func Voting(e Entry, norm Normalizer, samples int) Entry {
	base := e.NewIO
	e.NewIO = func(b Backend) IOProcessor {
		var gen IOProcessor
		if base != nil {
			gen = base(b)
		} else {
			gen = NewSimple(e.Input, e.Output, b)
		}
		return NewMajorityVoting(gen, norm, samples)
	}
	return e
}

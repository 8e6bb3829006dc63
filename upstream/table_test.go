package upstream_test

import (
	"testing"

	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
)

// served is a route of a table test: which endpoint serves a public name, under which name.
type served struct {
	ep       *route
	upstream string
	model    int
}

func (s served) State() *upstream.State { return s.ep.State() }

func TestBuildTable(t *testing.T) {
	eps := routes("low", "high", "mid", "none", "low2")
	prio := map[string]int{"low": 1, "high": 9, "mid": 5, "none": 9, "low2": 1}
	for _, e := range eps {
		e.cfg.Priority = prio[e.name()]
	}
	models := map[string]map[string]int{
		"low":  {"llama": 1, "qwen": 2},
		"high": {"llama-70b": 3, "qwen": 4},
		"mid":  {"llama": 5},
		"low2": {"llama": 6, "gpt": 7},
	}
	aliases := map[string]map[string]string{
		"high": {"llama": "llama-70b", "missing": "nowhere"},
		"low2": {"gpt": "llama"}, // shadowed by its own model gpt
		"none": {"llama": "llama"},
	}
	tb := upstream.BuildTable(eps,
		func(e *route) (map[string]int, map[string]string) { return models[e.name()], aliases[e.name()] },
		func(e *route, public, up string, m int) served { return served{e, up, m} })

	assert.Equal(t, []string{"gpt", "llama", "llama-70b", "qwen"}, tb.Names)
	describe := func(name string) []string {
		var out []string
		for _, s := range tb.Routes[name] {
			out = append(out, s.ep.name()+":"+s.upstream)
		}
		return out
	}
	assert.Equal(t, []string{"high:llama-70b", "mid:llama", "low:llama", "low2:llama"}, describe("llama"),
		"by priority, an alias among them; equal priorities in endpoint order")
	assert.Equal(t, []string{"high:qwen", "low:qwen"}, describe("qwen"))
	assert.Equal(t, []string{"low2:gpt"}, describe("gpt"), "an endpoint's own model shadows its alias")
	assert.Equal(t, []string{"high:llama-70b"}, describe("llama-70b"))
	assert.Equal(t, 3, tb.Routes["llama"][0].model, "the alias's route carries its target's model")
	assert.NotContains(t, tb.Routes, "missing", "an alias to a model the endpoint does not serve")

	empty := upstream.BuildTable([]*route{}, nil, func(*route, string, string, int) served { return served{} })
	assert.Empty(t, empty.Names)
	assert.Empty(t, empty.Routes)
}

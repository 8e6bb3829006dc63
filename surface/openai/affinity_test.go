package openai

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStickyKeys pins the keys sticky stores, so that a change to how they are derived keeps the
// pins made before it: each is the model in lower case, a NUL, and the FNV-64a of the key's
// source and value in base 36.
func TestStickyKeys(t *testing.T) {
	conv := `{"model":"Llama-3","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`
	long := `{"model":"llama","messages":[{"role":"user","content":"` + strings.Repeat("abcdefgh", 100) + `"}]}`
	prompt := `{"model":"llama","messages":[],"prompt":"Once upon a time"}`
	empty := `{"model":"llama","messages":[]}`
	olla := WithOllaSticky(context.Background())
	for _, c := range []struct {
		name       string
		ctx        context.Context
		body       string
		hdr        []string
		key        string // "" when nothing is stored
		state, src string
	}{
		{"session", context.Background(), conv, []string{HeaderOllaSession, "sess-1"}, "llama-3\x002l02s1c2mre21", "miss", "session_header"},
		{"session on olla", olla, conv, []string{HeaderOllaSession, "sess-1"}, "llama-3\x002l02s1c2mre21", "miss", "session_header"},
		{"messages", olla, conv, nil, "llama-3\x003smvtb1lrtysm", "miss", "prefix_hash"},
		{"prefix of long messages", olla, long, nil, "llama\x002h8ngyk9chtuz", "miss", "prefix_hash"},
		{"long session id", olla, long, []string{HeaderOllaSession, strings.Repeat("s", 257)}, "llama\x002h8ngyk9chtuz", "miss", "prefix_hash"},
		{"prompt", olla, prompt, []string{"Authorization", "Bearer k1"}, "llama\x001s4vrdaxhc061", "miss", "prefix_hash"},
		{"auth", olla, empty, []string{"Authorization", "Bearer k1"}, "llama\x00174yeh69oijkg", "miss", "auth_header"},
		{"none on olla", olla, empty, nil, "", "disabled", ""},
		{"none", context.Background(), conv, []string{"Authorization", "Bearer k1"}, "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Proxy{affinity: newAffinity()}
			req, err := pipeline.NewRequest("/v1/chat/completions", []byte(c.body))
			require.NoError(t, err)
			h := http.Header{}
			for i := 0; i+1 < len(c.hdr); i += 2 {
				h.Set(c.hdr[i], c.hdr[i+1])
			}
			out := http.Header{}
			for _, endpoint := range []string{"a", "a", "b"} {
				_, done := p.sticky(c.ctx, h, req)
				if done != nil {
					done(out, endpoint)
				}
			}
			var keys []string
			for k := range p.affinity.byKey {
				keys = append(keys, k)
			}
			if c.key == "" {
				assert.Empty(t, keys)
			} else {
				assert.Equal(t, []string{c.key}, keys)
			}
			state := c.state
			if state == "miss" {
				state = "repin" // the third request went to b
			}
			assert.Equal(t, state, out.Get(HeaderOllaSticky))
			assert.Equal(t, c.src, out.Get(HeaderOllaStickySource))
			if c.src == "session_header" {
				assert.Equal(t, h.Get(HeaderOllaSession), out.Get(headerOllaSessionEcho))
			}
		})
	}
}

// BenchmarkSticky: a sticky request's key derived, looked up and recorded, on Olla's routes with
// a prompt longer than the 512 bytes its key reads.
func BenchmarkSticky(b *testing.B) {
	p := &Proxy{affinity: newAffinity()}
	body := `{"model":"llama","messages":[{"role":"user","content":"` + strings.Repeat("abcdefgh", 100) + `"}]}`
	req, err := pipeline.NewRequest("/v1/chat/completions", []byte(body))
	require.NoError(b, err)
	ctx := WithOllaSticky(context.Background())
	h, out := http.Header{}, http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		_, done := p.sticky(ctx, h, req)
		done(out, "a")
	}
}

package openai

import (
	"bytes"
	"container/list"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/core/pipeline"

	"github.com/infergate/infergate/upstream"
)

// HeaderOllaSession is Olla's sticky-session request header: requests carrying the same value
// (and naming the same model) go to the endpoint that served the first of them while it is
// usable, so a conversation finds its prefix in that endpoint's KV cache. The gateway's own
// chat sessions (/v1/sessions) stick too; this is for clients that keep their history.
const HeaderOllaSession = "X-Olla-Session-Id"

// HeaderOllaSticky tells whether a sticky request found its endpoint (hit), started one (miss),
// or moved because its endpoint was not usable (repin), as Olla's X-Olla-Sticky-Session does.
const HeaderOllaSticky = "X-Olla-Sticky-Session"

// Olla's own bounds: 10,000 keys, each forgotten 10 minutes after its last request.
const (
	affinityMax = 10_000
	affinityTTL = 10 * time.Minute
)

// affinity remembers, per (model, session key), the endpoint that last served it: a bounded LRU
// with a sliding TTL.
type affinity struct {
	mu    sync.Mutex
	byKey map[string]*list.Element
	order list.List // of *pin, most recent first
	now   func() time.Time
	// counts for StickyStats, under mu
	insertions, hits, misses, evictions int64
}

// StickyStats are the sticky sessions' store counts, as Olla's /internal/stats/sticky shows them:
// hits and misses are lookups of the store, not requests' outcomes.
type StickyStats struct {
	Active, Insertions, Hits, Misses, Evictions int64
	Max                                         int64
	IdleTTL                                     time.Duration
}

// StickyStats returns the sticky sessions' store counts.
func (p *Proxy) StickyStats() StickyStats {
	a := p.affinity
	a.mu.Lock()
	defer a.mu.Unlock()
	return StickyStats{Active: int64(a.order.Len()), Insertions: a.insertions, Hits: a.hits, Misses: a.misses,
		Evictions: a.evictions, Max: affinityMax, IdleTTL: affinityTTL}
}

type pin struct {
	key, endpoint string
	at            time.Time
}

func newAffinity() *affinity { return &affinity{byKey: map[string]*list.Element{}, now: time.Now} }

func affinityKey(model, session string) string { return model + "\x00" + session }

// lookup returns the endpoint key last went to, if remembered and not expired.
func (a *affinity) lookup(key string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.byKey[key]
	if !ok {
		a.misses++
		return ""
	}
	p := e.Value.(*pin)
	if a.now().Sub(p.at) > affinityTTL {
		a.order.Remove(e)
		delete(a.byKey, key)
		a.misses++
		a.evictions++
		return ""
	}
	a.hits++
	return p.endpoint
}

// record remembers that key went to endpoint.
func (a *affinity) record(key, endpoint string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.byKey[key]; ok {
		p := e.Value.(*pin)
		p.endpoint, p.at = endpoint, a.now()
		a.order.MoveToFront(e)
		return
	}
	for a.order.Len() >= affinityMax {
		old := a.order.Back()
		a.order.Remove(old)
		delete(a.byKey, old.Value.(*pin).key)
		a.evictions++
	}
	a.byKey[key] = a.order.PushFront(&pin{key: key, endpoint: endpoint, at: a.now()})
	a.insertions++
}

// Olla's sticky-session headers beside HeaderOllaSticky: which part of the request the key came
// from, and the session id echoed when it came from HeaderOllaSession.
const (
	HeaderOllaStickySource = "X-Olla-Sticky-Key-Source"
	headerOllaSessionEcho  = "X-Olla-Session-Id"
)

// stickyPrefixBytes is how much of a prompt Olla's prefix_hash key reads: conversations that
// start alike (one system prompt) pin together, so the endpoint's KV cache holds their prefix.
const stickyPrefixBytes = 512

// ollaStickyKey marks a request that came through Olla's routes (WithOllaSticky).
type ollaStickyKey struct{}

// WithOllaSticky marks requests made under ctx as Olla's routes' (surface/olla): their sticky
// key is derived as Olla derives it, from the first source that yields one: X-Olla-Session-ID,
// else a hash of the prompt's first 512 bytes (the messages, else the prompt), else a hash of the
// Authorization header; a request with none is answered X-Olla-Sticky-Session: disabled. Other
// requests stick only when they send X-Olla-Session-ID.
func WithOllaSticky(ctx context.Context) context.Context {
	return context.WithValue(ctx, ollaStickyKey{}, true)
}

// stickyKey is req's sticky key, hashed (FNV-64a of its source then its value), and its source
// ("" when none), as WithOllaSticky describes; session is the session id when the key is one.
// olla tells whether the request came through Olla's routes. The prompt's bytes are hashed
// where they lie, not copied.
func stickyKey(olla bool, h http.Header, req *pipeline.Request) (sum uint64, source, session string) {
	if s := h.Get(HeaderOllaSession); s != "" && len(s) <= 256 {
		return fnv64a(fnv64a(fnvOffset64, "session_header"), s), "session_header", s
	}
	if !olla {
		return 0, "", ""
	}
	if b, err := req.Wire(); err == nil {
		v, ok := b.Get("messages")
		if !ok || len(bytes.TrimSpace(v)) <= 2 { // absent, or [] (Olla: missing or empty)
			v, ok = b.Get("prompt")
		}
		if ok {
			return fnv64a(fnv64a(fnvOffset64, "prefix_hash"), v[:min(len(v), stickyPrefixBytes)]), "prefix_hash", ""
		}
	}
	if a := h.Get("Authorization"); a != "" {
		return fnv64a(fnv64a(fnvOffset64, "auth_header"), a), "auth_header", ""
	}
	return 0, "", ""
}

// FNV-64a (hash/fnv's New64a), inlined so that a prompt's bytes and a header's string are
// hashed without a copy or a hash.Hash to allocate.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// fnv64a continues the FNV-64a hash h over s.
func fnv64a[T string | []byte](h uint64, s T) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// sticky applies a request's sticky key: the endpoint it is pinned to is preferred. It returns
// the context to route with and what to do once the response names its endpoint. Keys are
// scoped by the model's name in lower case and stored hashed (FNV-64a), as Olla's are.
func (p *Proxy) sticky(ctx context.Context, h http.Header, req *pipeline.Request) (context.Context, func(w http.Header, endpoint string)) {
	olla := ctx.Value(ollaStickyKey{}) != nil
	sum, source, session := stickyKey(olla, h, req)
	if source == "" {
		if !olla {
			return ctx, nil
		}
		return ctx, func(w http.Header, endpoint string) {
			if endpoint != "" {
				w.Set(HeaderOllaSticky, "disabled")
			}
		}
	}
	key := affinityKey(strings.ToLower(req.Model()), strconv.FormatUint(sum, 36))
	pinned := p.affinity.lookup(key)
	return upstream.WithPreferred(ctx, pinned), func(w http.Header, endpoint string) {
		if endpoint == "" {
			return
		}
		state := "miss"
		switch {
		case pinned == endpoint:
			state = "hit"
		case pinned != "":
			state = "repin"
		}
		w.Set(HeaderOllaSticky, state)
		w.Set(HeaderOllaStickySource, source)
		if session != "" {
			w.Set(headerOllaSessionEcho, session)
		}
		p.affinity.record(key, endpoint)
	}
}

package respcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/infergate/infergate/internal/jsonwire"
	"github.com/infergate/infergate/lib/openaiwire"
)

// lookup is what the stage derived from one request: its keys and whether it may be cached.
type lookup struct {
	// key is the exact key: the hash of the whole request (minus what does not change the
	// answer), prefixed by the model and owner.
	key string
	// partition is the semantic partition (the hash of the request without the last user
	// message's content) and text that content; both empty when the request has nothing to
	// embed (no user message, content that is not text, a prompt list).
	partition, text string
	// bypass names why the request is not served from cache nor stored: "" when it may be.
	bypass string
}

// Bypass reasons, as X-Infergate-Cache shows them ("bypass; reason=...") and the metrics count.
const (
	reasonTemperature = "temperature" // a temperature above 0 (or the model's default)
	reasonN           = "n"           // several choices asked for
	reasonLogprobs    = "logprobs"    // log probabilities asked for (a replayed or assembled answer has none)
	reasonNoCache     = "no-cache"    // Cache-Control: no-cache (read skipped; stored)
	reasonPath        = "path"        // not a chat completion or completion
	reasonBody        = "body"        // a body the stage could not read
	reasonStore       = "store"       // the store failed (Redis unreachable)
	reasonTooDeep     = "too-deep"    // a request nested beyond maxDepth
	reasonStored      = "stored"      // a stored answer that does not replay as a stream (asked upstream)
)

// skipped are the body members that do not change the answer: how it is delivered (stream,
// stream_options), who asked (user), and the gateway's own members.
var skipped = []string{"stream", "stream_options", "user", "kv_transfer_params"}

// maxDepth bounds the nesting the canonical encoder follows (encoding/json allows 10,000).
const maxDepth = 64

// keyer derives lookups for one model.
type keyer struct {
	model    string
	semantic bool
	sampling bool     // serve any temperature
	skip     []string // skipped plus the configured ones
}

// derive reads the members of w, a request's body, and returns its lookup for owner. path is
// the API path.
func (k *keyer) derive(path, owner string, w *openaiwire.Body) lookup {
	if !k.sampling {
		if t, ok := w.Get("temperature"); !ok || isNull(t) || !isZero(t) {
			return lookup{bypass: reasonTemperature}
		}
	}
	if n, ok := w.Get("n"); ok && !isNull(n) && !isOne(n) {
		return lookup{bypass: reasonN}
	}
	// Chat's logprobs is a boolean (with top_logprobs), a completion's a number: either, set,
	// asks for what a stream assembled or replayed does not carry.
	for _, f := range []string{"logprobs", "top_logprobs"} {
		if v, ok := w.Get(f); ok && !isNull(v) && !isZero(v) && string(bytes.TrimSpace(v)) != "false" {
			return lookup{bypass: reasonLogprobs}
		}
	}
	full, err := k.canonicalMembers(nil, w, "", false, nil)
	if err != nil {
		return lookup{bypass: bypassFor(err)}
	}
	l := lookup{key: k.hash("exact", path, owner, full)}
	if !k.semantic {
		return l
	}
	// The semantic partition: the same request with the text to embed taken out.
	name, value, text, ok := takeText(path, w)
	if !ok {
		return l
	}
	part, err := k.canonicalMembers(full[:0], w, name, true, value)
	if err != nil {
		return lookup{bypass: bypassFor(err)}
	}
	l.partition, l.text = k.hash("semantic", path, owner, part), text
	return l
}

// keyed reports whether member name tells two requests' answers apart: not one of those the
// keyer skips, nor the model (the key's prefix) nor n (derive bypasses any n but 1).
func (k *keyer) keyed(name string) bool {
	return !slices.Contains(k.skip, name) && name != "model" && name != "n"
}

func bypassFor(err error) string {
	if errors.Is(err, errTooDeep) {
		return reasonTooDeep
	}
	return reasonBody
}

// canonicalMembers appends the canonical object of w's keyed members, with the value of member
// swap replaced by with when swapping is set (a flag, not an empty name, because "" is a member
// name too). The view yields the members sorted by name, each once (the last of duplicates), as
// the canonical form has them.
func (k *keyer) canonicalMembers(dst []byte, w *openaiwire.Body, swap string, swapping bool, with []byte) ([]byte, error) {
	var p canonParser
	dst = append(dst, '{')
	first := true
	for name, v := range w.All() {
		if !k.keyed(name) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, name)
		dst = append(dst, ':')
		if swapping && name == swap {
			dst = append(dst, with...)
			continue
		}
		var err error
		if dst, err = p.canonical(dst, v); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// hash is "model|owner|" followed by the SHA-256 of everything that tells two requests apart,
// length-prefixed so no two different inputs hash the same text. The readable prefix is for
// whoever looks at the store; the hash alone decides.
func (k *keyer) hash(kind, path, owner string, canon []byte) string {
	h := sha256.New()
	for _, s := range []string{kind, path, k.model, owner} {
		var n [10]byte
		h.Write(strconv.AppendInt(n[:0], int64(len(s)), 10))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	h.Write(canon)
	var sum [sha256.Size]byte
	return k.model + "|" + owner + "|" + hex.EncodeToString(h.Sum(sum[:0]))
}

// takeText finds the text a semantic search embeds: a chat request's last user message's
// content (a string, or the text parts of a list of parts), or a completion's prompt when it is
// one string. It returns the member holding it and that member's canonical value with the text
// taken out (the content, or the prompt, null).
func takeText(path string, w *openaiwire.Body) (name string, value []byte, text string, ok bool) {
	if path == pathCompletions {
		var p string
		if raw, found := w.Get("prompt"); !found || json.Unmarshal(raw, &p) != nil {
			return "", nil, "", false
		}
		return "prompt", []byte("null"), p, true
	}
	var msgs []json.RawMessage
	raw, _ := w.Get("messages") // nil when absent: no messages to take from
	if json.Unmarshal(raw, &msgs) != nil {
		return "", nil, "", false
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		var m map[string]json.RawMessage
		var role string
		if json.Unmarshal(msgs[i], &m) != nil || json.Unmarshal(m["role"], &role) != nil || role != "user" {
			continue
		}
		var content any
		if json.Unmarshal(m["content"], &content) != nil {
			return "", nil, "", false
		}
		if text, ok = contentText(content); !ok {
			return "", nil, "", false
		}
		m["content"] = json.RawMessage("null")
		without, err := json.Marshal(m)
		if err != nil {
			return "", nil, "", false
		}
		msgs[i] = without
		all, err := json.Marshal(msgs)
		if err != nil {
			return "", nil, "", false
		}
		if value, err = canonicalJSON(nil, all); err != nil {
			return "", nil, "", false
		}
		return "messages", value, text, true
	}
	return "", nil, "", false
}

// contentText is a message content's text: the string, or the text parts joined by newlines.
// Content with anything else (an image, audio) has no text that could stand for it.
func contentText(c any) (string, bool) {
	switch c := c.(type) {
	case string:
		return c, true
	case []any:
		var b strings.Builder
		for i, p := range c {
			part, _ := p.(map[string]any)
			text, ok := part["text"].(string)
			if part == nil || part["type"] != "text" || !ok {
				return "", false
			}
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(text)
		}
		return b.String(), true
	}
	return "", false
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// isZero reports whether v is the number 0.
func isZero(v json.RawMessage) bool {
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
	return err == nil && f == 0
}

func isOne(v json.RawMessage) bool {
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
	return err == nil && f == 1
}

// appendNumber writes a JSON number in one spelling: integers as integers, others as the
// shortest decimal that reads back the same float64. integer: s has neither a fraction nor an
// exponent.
func appendNumber(dst []byte, s string, integer bool) []byte {
	if integer {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return strconv.AppendInt(dst, i, 10)
		}
		return append(dst, s...) // beyond int64: as written
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil { // out of range
		return append(dst, s...)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.AppendInt(dst, int64(f), 10)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// appendString writes s as a JSON string, escaping only what JSON requires (every control
// character as \u00XX), invalid UTF-8 as U+FFFD: the keys' one spelling of a string.
func appendString(dst []byte, s string) []byte {
	return jsonwire.AppendString(dst, s, jsonwire.Canonical)
}

package respcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
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
	reasonNoCache     = "no-cache"    // Cache-Control: no-cache (read skipped; stored)
	reasonPath        = "path"        // not a chat completion or completion
	reasonBody        = "body"        // a body the stage could not read
	reasonStore       = "store"       // the store failed (Redis unreachable)
	reasonTooDeep     = "too-deep"    // a request nested beyond maxDepth
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

// derive reads req's members and returns its lookup for owner. path is the API path.
func (k *keyer) derive(path, owner string, fields map[string]json.RawMessage) lookup {
	if !k.sampling {
		if t, ok := fields["temperature"]; !ok || isNull(t) || !isZero(t) {
			return lookup{bypass: reasonTemperature}
		}
	}
	if n, ok := fields["n"]; ok && !isNull(n) && !isOne(n) {
		return lookup{bypass: reasonN}
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		if slices.Contains(k.skip, name) || name == "model" || name == "n" {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)

	vals := make(map[string]any, len(names))
	for _, name := range names {
		v, err := decodeValue(fields[name])
		if err != nil {
			return lookup{bypass: reasonBody}
		}
		vals[name] = v
	}
	full, err := canonical(nil, vals, 0)
	if err != nil {
		return lookup{bypass: reasonTooDeep}
	}
	l := lookup{key: k.hash("exact", path, owner, full)}
	if !k.semantic {
		return l
	}
	// The semantic partition: the same request with the text to embed taken out.
	text, ok := takeText(path, vals)
	if !ok {
		return l
	}
	part, err := canonical(nil, vals, 0)
	if err != nil {
		return lookup{bypass: reasonTooDeep}
	}
	l.partition, l.text = k.hash("semantic", path, owner, part), text
	return l
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

// takeText removes the text a semantic search embeds from vals and returns it: a chat request's
// last user message's content (a string, or the text parts of a list of parts; the content
// becomes null in vals), or a completion's prompt when it is one string.
func takeText(path string, vals map[string]any) (string, bool) {
	if strings.HasSuffix(path, "/chat/completions") {
		msgs, _ := vals["messages"].([]any)
		for i := len(msgs) - 1; i >= 0; i-- {
			m, _ := msgs[i].(map[string]any)
			if m == nil || m["role"] != "user" {
				continue
			}
			text, ok := contentText(m["content"])
			if !ok {
				return "", false
			}
			m["content"] = nil // vals is the lookup's own, and the exact key is made already
			return text, true
		}
		return "", false
	}
	if p, ok := vals["prompt"].(string); ok {
		vals["prompt"] = nil
		return p, true
	}
	return "", false
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

// decodeValue decodes one JSON value, numbers kept as their text.
func decodeValue(raw json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

var errTooDeep = errors.New("respcache: JSON nested too deeply")

// canonical appends v's canonical JSON to dst: object members sorted by key, no insignificant
// space, strings with one escaping, numbers in one spelling (1, 1.0 and 1e0 are all 1), so two
// requests that mean the same hash the same.
func canonical(dst []byte, v any, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	var err error
	switch v := v.(type) {
	case nil:
		dst = append(dst, "null"...)
	case bool:
		dst = strconv.AppendBool(dst, v)
	case string:
		dst = appendString(dst, v)
	case json.Number:
		dst = appendNumber(dst, string(v))
	case []any:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = canonical(dst, e, depth+1); err != nil {
				return nil, err
			}
		}
		dst = append(dst, ']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			if dst, err = canonical(dst, v[k], depth+1); err != nil {
				return nil, err
			}
		}
		dst = append(dst, '}')
	default:
		return nil, fmt.Errorf("respcache: unexpected JSON value %T", v)
	}
	return dst, nil
}

// appendNumber writes a JSON number in one spelling: integers as integers, others as the
// shortest decimal that reads back the same float64.
func appendNumber(dst []byte, s string) []byte {
	if !strings.ContainsAny(s, ".eE") {
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

// appendString writes s as a JSON string, escaping only what JSON requires.
func appendString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

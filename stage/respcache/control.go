package respcache

import (
	"strconv"
	"strings"
)

// control is what a request's Cache-Control header asks of the cache.
type control struct {
	// noCache: do not answer from the cache (the answer may still be stored). no-cache, and
	// max-age=0, which asks for an answer no older than 0 s.
	noCache bool
	// noStore: do not store the answer.
	noStore bool
}

// parseControl reads the Cache-Control header's values (RFC 9111 §5.2: a comma-separated list
// of directives, names case-insensitive, each with an optional =token or ="quoted string" that
// may itself hold commas). Unknown directives are ignored, and so is anything malformed up to
// the next comma.
func parseControl(values []string) control {
	var c control
	for _, v := range values {
		for len(v) > 0 {
			var name, arg string
			name, arg, v = nextDirective(v)
			switch {
			case strings.EqualFold(name, "no-cache"):
				c.noCache = true
			case strings.EqualFold(name, "no-store"):
				c.noStore = true
			case strings.EqualFold(name, "max-age"):
				if n, err := strconv.ParseUint(arg, 10, 64); err == nil && n == 0 {
					c.noCache = true
				}
			}
		}
	}
	return c
}

// nextDirective splits the first directive off v: its name, its argument (unquoted), and what
// follows the comma that ends it.
func nextDirective(v string) (name, arg, rest string) {
	v = strings.TrimLeft(v, " \t,")
	i := strings.IndexAny(v, "=,")
	if i < 0 {
		return strings.TrimSpace(v), "", ""
	}
	name = strings.TrimSpace(v[:i])
	if v[i] == ',' {
		return name, "", v[i+1:]
	}
	v = strings.TrimLeft(v[i+1:], " \t")
	if !strings.HasPrefix(v, `"`) {
		arg, rest, _ = strings.Cut(v, ",")
		return name, strings.TrimSpace(arg), rest
	}
	// A quoted string: backslash escapes one character; unterminated, it runs to the end.
	var b strings.Builder
	for j := 1; j < len(v); j++ {
		switch v[j] {
		case '\\':
			if j+1 < len(v) {
				j++
				b.WriteByte(v[j])
			}
		case '"':
			_, rest, _ = strings.Cut(v[j+1:], ",")
			return name, b.String(), rest
		default:
			b.WriteByte(v[j])
		}
	}
	return name, b.String(), ""
}

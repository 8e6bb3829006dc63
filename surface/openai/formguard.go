package openai

import (
	"bytes"
	"io"
	"net/url"

	"github.com/infergate/infergate/core/pipeline"
)

// formGuard reads the rest of a streamed form from the client and passes each byte on only once
// it knows the byte is not part of a second model field: the form was routed, and its key
// checked, on the model field in its head, and an upstream reads the last one (Starlette's form
// parser, vLLM's, keeps the last of a repeated name). A part header that names the field model
// again makes the read fail before any of that header is passed on, so the upstream is left with
// a form cut short, which it refuses, and the client gets guard's error.
//
// It finds part headers as liberally as any parser might: after every "\n--" boundary (bare LF
// or CRLF, with anything after it but a letter or digit), and a header names the field when any
// of its lines, unfolded, has a name or name* parameter whose value is model in any case. So a
// form no multipart parser reads as having two model fields can still be refused here (a file
// field named MODEL, a part's content that happens to look like a header), never the other way.
//
// It is hand-written because no multipart parser hands back the bytes it read: mime/multipart
// gives a part's content, not the delimiters and headers, and those must go upstream as they
// came.
type formGuard struct {
	src   io.Reader
	delim []byte // "\n--" boundary
	// buf holds bytes read from src (and, first, the head's) not yet passed on: buf[:pos] are
	// cleared, buf[pos:] held (a partial delimiter, or a part header not yet ended). The head's
	// bytes are scanned but never passed on: skip counts those still in buf.
	buf  []byte
	out  int // buf[:out] have been passed on (or skipped)
	pos  int
	skip int
	hdr  int // where the held delimiter starts in buf; -1 in a part's content
	dl   int // the held delimiter's length (the form's first has no line feed)
	// first reports that the form's first bytes have not been looked at yet.
	first bool
	// owned reports whether buf is the guard's own (at first it is the head, not to be written).
	owned bool
	// models counts the part headers naming the model field, the head's included.
	models int
	eof    bool
	err    error
}

// formGuardRead is how much a formGuard reads from the client at a time. It holds at most a part
// header (maxPartHeader), its delimiter and a read's bytes besides what it has passed on.
const formGuardRead = 32 << 10

// newFormGuard is a guard of rest, the bytes after head in a form with boundary. It scans head
// first (which the caller has sent or will send itself); the number of model fields found in it
// is models.
func newFormGuard(head []byte, rest io.Reader, boundary string) *formGuard {
	g := &formGuard{src: rest, delim: []byte("\n--" + boundary), hdr: -1}
	g.buf, g.skip = head, len(head) // scanned in place, never written: fill copies what it keeps
	g.first = true
	g.err = g.scan()
	return g
}

// scan clears what it can of buf[pos:]; at EOF all of it. It fails on a second model field, or
// on a part header longer than maxPartHeader.
func (g *formGuard) scan() error {
	if g.first { // the form's first delimiter has no line feed before it
		if len(g.buf) < len(g.delim)-1 && !g.eof {
			return nil
		}
		g.first = false
		if bytes.HasPrefix(g.buf, g.delim[1:]) {
			g.hdr, g.dl = 0, len(g.delim)-1
		}
	}
	for {
		if g.hdr < 0 {
			i := bytes.Index(g.buf[g.pos:], g.delim)
			if i < 0 {
				keep := len(g.delim) - 1 // a delimiter's start may end buf
				if g.eof {
					keep = 0
				}
				g.pos = max(g.pos, len(g.buf)-keep)
				return nil
			}
			g.hdr, g.dl = g.pos+i, len(g.delim)
			g.pos = g.hdr
		}
		after := g.buf[g.hdr+g.dl:]
		if len(after) < 2 && !g.eof {
			return nil
		}
		switch {
		case bytes.HasPrefix(after, []byte("--")):
			// A close delimiter: what follows is no part's header (but a later delimiter is
			// looked at all the same).
			g.pos, g.hdr = g.hdr+g.dl+2, -1
			continue
		case len(after) > 0 && !isBlank(after[0]):
			// The boundary is the start of a longer string: content, as every parser takes it.
			g.pos, g.hdr = g.hdr+1, -1
			continue
		}
		end := headerEnd(after)
		if end < 0 {
			if len(after) > maxPartHeader {
				return pipeline.InvalidRequest("", "invalid_form", "A part's header in the form is longer than 8 KiB.")
			}
			if !g.eof {
				return nil
			}
			end = len(after) // cut short: still looked at
		}
		if namesModel(after[:end]) {
			g.models++
			if g.models > 1 {
				return pipeline.InvalidRequest("model", "duplicate_model",
					"The form names its model more than once; a form sent on as it arrives must name it once, before its file.")
			}
		}
		g.pos, g.hdr = g.hdr+g.dl+end, -1
	}
}

// isBlank reports whether c may follow a delimiter's boundary on its line (a line end, or
// RFC 2046's transport padding).
func isBlank(c byte) bool { return c == '\r' || c == '\n' || c == ' ' || c == '\t' }

// isWordByte reports whether c is a letter or digit.
func isWordByte(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' }

// headerEnd is the length of a part header that starts right after a delimiter (the rest of the
// delimiter's line, the header's lines, the empty line that ends it), or -1 when b holds no end.
// Bare LFs count as line ends, as lenient parsers take them.
func headerEnd(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		// b[i] ends a line; the header ends if the next line is empty.
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
	}
	return -1
}

// namesModel reports whether a part header names the field model: whether any of its lines,
// unfolded, has a name= or name*= parameter whose value, unquoted and without backslashes, is
// model in any letter case. Any header line counts, not only Content-Disposition: a stricter
// reading could be slipped past.
func namesModel(h []byte) bool {
	// Unfold: a line that starts with a space or tab continues the one before.
	var lines [][]byte
	for _, l := range bytes.Split(h, []byte("\n")) {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(lines) > 0 && len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
			lines[len(lines)-1] = append(append([]byte(nil), lines[len(lines)-1]...), l...)
			continue
		}
		lines = append(lines, l)
	}
	for _, l := range lines {
		// Lower case, without blanks or backslashes: "Name = \"mo\\del\"" is name="model".
		c := make([]byte, 0, len(l))
		for _, b := range l {
			switch {
			case b == ' ' || b == '\t' || b == '\\' || b == '\r':
			case b >= 'A' && b <= 'Z':
				c = append(c, b+'a'-'A')
			default:
				c = append(c, b)
			}
		}
		for i := 0; ; {
			j := bytes.Index(c[i:], []byte("name"))
			if j < 0 {
				break
			}
			at := i + j
			i = at + 1
			if at > 0 && isWordByte(c[at-1]) {
				continue // filename=, or a word
			}
			v := c[at+len("name"):]
			v = bytes.TrimPrefix(v, []byte("*"))
			if !bytes.HasPrefix(v, []byte("=")) {
				continue
			}
			v = v[1:]
			if k := bytes.LastIndexByte(v, '\''); k >= 0 && bytes.IndexByte(v[:k], '"') < 0 {
				v = v[k+1:] // name*=utf-8''model
			}
			if end := bytes.IndexByte(v, ';'); end >= 0 {
				v = v[:end]
			}
			v = bytes.Trim(v, `"`)
			if u, err := url.PathUnescape(string(v)); err == nil && u == "model" || string(v) == "model" {
				return true // RFC 2231's name*= is percent-encoded
			}
		}
	}
	return false
}

// Read passes on cleared bytes of the rest, reading more from the client as it needs to.
func (g *formGuard) Read(p []byte) (int, error) {
	for {
		if g.out < g.pos {
			if g.out < g.skip { // the head's: sent by the caller
				g.out = min(g.skip, g.pos)
				continue
			}
			n := copy(p, g.buf[g.out:g.pos])
			g.out += n
			return n, nil
		}
		if g.err != nil {
			return 0, g.err
		}
		if g.eof {
			return 0, io.EOF
		}
		g.fill()
	}
}

// fill reads once from the client into buf, after dropping what has been passed on, and scans
// what came.
func (g *formGuard) fill() {
	if !g.owned || cap(g.buf)-len(g.buf)+g.out < formGuardRead {
		nb := make([]byte, len(g.buf)-g.out, len(g.buf)-g.out+2*formGuardRead)
		copy(nb, g.buf[g.out:])
		g.buf, g.owned = nb, true
	} else if g.out > 0 {
		g.buf = g.buf[:copy(g.buf, g.buf[g.out:])]
	}
	if g.out > 0 {
		g.pos -= g.out
		g.skip = max(g.skip-g.out, 0)
		if g.hdr >= 0 {
			g.hdr -= g.out
		}
		g.out = 0
	}
	n, err := g.src.Read(g.buf[len(g.buf) : len(g.buf)+formGuardRead])
	g.buf = g.buf[:len(g.buf)+n]
	switch {
	case err == io.EOF:
		g.eof = true
	case err != nil:
		g.err = err
		return
	}
	if serr := g.scan(); serr != nil {
		g.err = serr
	}
}

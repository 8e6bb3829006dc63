package granitestage

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/jsonscan"
)

// completionAnswer is what the stage reads of an upstream's whole /v1/completions answer.
type completionAnswer struct {
	ID                string             `json:"id"`
	Model             string             `json:"model"`
	SystemFingerprint json.RawMessage    `json:"system_fingerprint,omitempty"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usage             `json:"usage"`
}

type completionChoice struct {
	Text         string  `json:"text"`
	FinishReason *string `json:"finish_reason"`
}

type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// decodeCompletion reads an upstream's completion answer as json.Unmarshal into
// completionAnswer would, and fails where it would.
//
// encoding/json spent most of a Granite request's stage time here (validating the whole answer,
// then decoding it through reflection, the 4,000-character text twice over): scanCompletion
// reads the members the stage uses in one validating pass. It handles the answers upstreams
// send; anything unusual that encoding/json treats in its own way (a member named twice or in
// another case, an escaped member name, a value of another type, an error) goes to
// json.Unmarshal, so the result is encoding/json's by construction. FuzzDecodeCompletion checks
// the two against each other.
func decodeCompletion(data []byte, c *completionAnswer) error {
	if scanCompletion(data, c) {
		return nil
	}
	*c = completionAnswer{}
	return json.Unmarshal(data, c)
}

// maxScanDepth is the nesting the fast path follows; deeper answers go to encoding/json.
const maxScanDepth = 256

// jscan is a validating JSON reader over one document. Its methods return false at anything
// that is not JSON, and at what the fast path leaves to encoding/json.
type jscan struct {
	b []byte
	i int
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips whitespace and returns the next byte (0 at the end).
func (s *jscan) next() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// str reads a string at s.i (its opening quote), returning its contents' bounds and whether
// they hold an escape or a byte outside ASCII (then it needs unquoting).
func (s *jscan) str() (start, end int, plain, ok bool) {
	b := s.b
	i := s.i + 1
	start = i
	plain = true
	for {
		if plain {
			i = jsonscan.SkipPlainASCII(b, i)
		} else {
			i = jsonscan.SkipPlain(b, i) // plain or not is known: no stop at each byte above 0x7F
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return start, i, plain, true
		case c < 0x20:
			return 0, 0, false, false
		case c == '\\':
			plain = false
			if i+1 >= len(b) {
				return 0, 0, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return 0, 0, false, false
				}
				i += 6
			default:
				return 0, 0, false, false
			}
		case c >= utf8.RuneSelf:
			plain = false
			i++
		default:
			i++
		}
	}
	return 0, 0, false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number reads a number at s.i, as JSON's grammar has it.
func (s *jscan) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	s.i = i
	return true
}

func (s *jscan) lit(l string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(l)) {
		return false
	}
	s.i += len(l)
	return true
}

// skip reads one value of any kind at s.i (whitespace skipped first).
func (s *jscan) skip(depth int) bool {
	switch s.next() {
	case '"':
		_, _, _, ok := s.str()
		return ok
	case '{':
		if depth >= maxScanDepth {
			return false
		}
		return s.members(func(int, int, bool) bool { return s.skip(depth + 1) })
	case '[':
		if depth >= maxScanDepth {
			return false
		}
		return s.array(func() bool { return s.skip(depth + 1) })
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return s.number()
	}
	return false
}

// object reads an object at s.i member by member: member gets each name (unescaped names go to
// encoding/json) with s.i at its value, and reads the value.
func (s *jscan) object(member func(name []byte) bool) bool {
	return s.members(func(start, end int, plain bool) bool {
		if !plain && bytes.IndexByte(s.b[start:end], '\\') >= 0 {
			return false // an escaped name: encoding/json matches its unescaped form
		}
		return member(s.b[start:end])
	})
}

// members reads an object at s.i member by member: member gets the bounds of each name in s.b
// (plain: it holds no escape) with s.i at its value, and reads the value.
func (s *jscan) members(member func(start, end int, plain bool) bool) bool {
	if s.next() != '{' {
		return false
	}
	s.i++
	if s.next() == '}' {
		s.i++
		return true
	}
	for {
		if s.next() != '"' {
			return false
		}
		start, end, plain, ok := s.str()
		if !ok || s.next() != ':' {
			return false
		}
		s.i++
		if !member(start, end, plain) {
			return false
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// field says which of names (exact) a member name is: its index, -1 for none, or -2 for a
// name that encoding/json would match case-insensitively (left to it).
func field(name []byte, names ...string) int {
	for i, n := range names {
		if string(name) == n {
			return i
		}
	}
	// The names are ASCII: an ASCII name of another length is none of them in any case (only
	// a name with other letters, like ſ for s, can fold to one of another length).
	ascii := true
	for _, c := range name {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	for _, n := range names {
		if (!ascii || len(name) == len(n)) && bytes.EqualFold(name, []byte(n)) {
			return -2
		}
	}
	return -1
}

// once records that member i was read; a second time is left to encoding/json (it merges).
func once(seen *uint32, i int) bool {
	if *seen&(1<<i) != 0 {
		return false
	}
	*seen |= 1 << i
	return true
}

// known reads an object at s.i whose members named in names are read by read, given the name's
// index, each once; other members are skipped (nested at most depth deeper than the bound skip
// keeps). A name met twice, escaped, or one of names in another case is false: encoding/json
// treats those in its own way.
func (s *jscan) known(names []string, depth int, read func(f int) bool) bool {
	var seen uint32
	return s.object(func(name []byte) bool {
		f := field(name, names...)
		if f == -1 {
			return s.skip(depth)
		}
		return f >= 0 && once(&seen, f) && read(f)
	})
}

// objects reads an array of objects at s.i (a null element is a zero T), appending each to
// *dst: read reads member f (of names, as known reads them) into the element being built.
func objects[T any](s *jscan, dst *[]T, names []string, read func(e *T, f int) bool) bool {
	return s.array(func() bool {
		var e T
		if !s.nullOr(func() bool {
			return s.known(names, 2, func(f int) bool { return read(&e, f) })
		}) {
			return false
		}
		*dst = append(*dst, e)
		return true
	})
}

// end says whether only whitespace is left: a document is one value.
func (s *jscan) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// rawCopy reads one value of any kind into *dst as rawValue does, copied (as encoding/json
// copies a json.RawMessage): the document's buffer may be reused.
func (s *jscan) rawCopy(depth int, dst *json.RawMessage) bool {
	v, ok := s.rawValue(depth)
	*dst = append(json.RawMessage(nil), v...)
	return ok
}

// stringValue reads a string or null into *dst (null leaves it, as encoding/json does).
func (s *jscan) stringValue(dst *string) bool {
	switch s.next() {
	case 'n':
		return s.lit("null")
	case '"':
		v, ok := s.strDecode()
		if ok {
			*dst = v
		}
		return ok
	}
	return false
}

// stringPtr reads a string into a new *dst, or null (which leaves *dst nil, as encoding/json
// does for a member it meets once).
func (s *jscan) stringPtr(dst **string) bool {
	return s.nullOr(func() bool {
		var v string
		if !s.stringValue(&v) {
			return false
		}
		*dst = &v
		return true
	})
}

// nullOr reads null, or else the value read reads.
func (s *jscan) nullOr(read func() bool) bool {
	if s.next() == 'n' {
		return s.lit("null")
	}
	return read()
}

// rawValue reads one value of any kind (nested at most depth levels deeper than the bound
// skip keeps) and returns its bytes, capped: appending to them cannot write past them.
func (s *jscan) rawValue(depth int) ([]byte, bool) {
	s.ws()
	from := s.i
	if !s.skip(depth) {
		return nil, false
	}
	return s.b[from:s.i:s.i], true
}

// strDecode reads a string at s.i (its opening quote) and decodes it as encoding/json does, in
// the one pass that validates it: escapes resolved, a lone or broken surrogate and each byte of
// invalid UTF-8 as U+FFFD.
func (s *jscan) strDecode() (string, bool) {
	b := s.b
	i := s.i + 1
	start := i
	i = jsonscan.SkipPlainASCII(b, i)
	if i < len(b) && b[i] == '"' {
		s.i = i + 1
		return string(b[start:i]), true
	}
	var out strings.Builder
	out.Grow(len(b) - start)
	lit := start // the start of the bytes not yet written
	for {
		if i = jsonscan.SkipPlainASCII(b, i); i >= len(b) {
			return "", false
		}
		switch c := b[i]; {
		case c == '"':
			out.Write(b[lit:i])
			s.i = i + 1
			return out.String(), true
		case c < 0x20:
			return "", false
		case c == '\\':
			out.Write(b[lit:i])
			if i+1 >= len(b) {
				return "", false
			}
			switch b[i+1] {
			case '"', '\\', '/':
				out.WriteByte(b[i+1])
			case 'b':
				out.WriteByte('\b')
			case 'f':
				out.WriteByte('\f')
			case 'n':
				out.WriteByte('\n')
			case 'r':
				out.WriteByte('\r')
			case 't':
				out.WriteByte('\t')
			case 'u':
				r, ok := u4(b[i:])
				if !ok {
					return "", false
				}
				if r < utf8.RuneSelf { // encoding/json's \u003c for '<', and the like
					out.WriteByte(byte(r))
					i += 6
					lit = i
					continue
				}
				if utf16.IsSurrogate(r) {
					if r2, ok := u4(b[i+6:]); ok {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							out.WriteRune(d)
							i += 12
							lit = i
							continue
						}
					}
					r = utf8.RuneError
				}
				out.WriteRune(r)
				i += 6
				lit = i
				continue
			default:
				return "", false
			}
			i += 2
			lit = i
		default: // outside ASCII
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				out.Write(b[lit:i])
				out.WriteString("\uFFFD")
				lit = i + 1
			}
			i += n
		}
	}
}

// u4 reads a \uXXXX escape at the start of b.
func u4(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// intValue reads an integer or null into *dst, as encoding/json reads an int64.
func (s *jscan) intValue(dst *int64) bool {
	switch c := s.next(); {
	case c == 'n':
		return s.lit("null")
	case c == '-' || '0' <= c && c <= '9':
		start := s.i
		if !s.number() {
			return false
		}
		n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
		if err != nil {
			return false
		}
		*dst = n
		return true
	}
	return false
}

var (
	answerNames = []string{"id", "model", "system_fingerprint", "choices", "usage"}
	choiceNames = []string{"text", "finish_reason"}
	usageNames  = []string{"prompt_tokens", "completion_tokens", "total_tokens"}
)

// scanCompletion is decodeCompletion's fast path: true when it read data whole, as
// encoding/json would have.
func scanCompletion(data []byte, c *completionAnswer) bool {
	s := jscan{b: data}
	return s.known(answerNames, 1, func(f int) bool {
		switch f {
		case 0:
			return s.stringValue(&c.ID)
		case 1:
			return s.stringValue(&c.Model)
		case 2:
			return s.rawCopy(1, &c.SystemFingerprint)
		case 3:
			return s.choices(c)
		default:
			return s.usage(c)
		}
	}) && s.end()
}

func (s *jscan) choices(c *completionAnswer) bool {
	if s.next() == 'n' {
		return s.lit("null")
	}
	c.Choices = make([]completionChoice, 0, 1)
	return objects(s, &c.Choices, choiceNames, func(ch *completionChoice, f int) bool {
		if f == 0 {
			return s.stringValue(&ch.Text)
		}
		return s.stringPtr(&ch.FinishReason)
	})
}

func (s *jscan) usage(c *completionAnswer) bool {
	if s.next() == 'n' {
		return s.lit("null") // c.Usage stays nil
	}
	u := &usage{}
	if !s.known(usageNames, 2, func(f int) bool {
		return s.intValue([...]*int64{&u.PromptTokens, &u.CompletionTokens, &u.TotalTokens}[f])
	}) {
		return false
	}
	c.Usage = u
	return true
}

// decodeChunk reads an upstream's stream chunk as json.Unmarshal into completionChunk would,
// and fails where it would: scanChunk in one validating pass where it can (a stream is read a
// chunk per token, and encoding/json cost about half of each chunk's time), encoding/json for
// anything unusual, as decodeCompletion does. FuzzDecodeChunk checks the two against each other.
//
// c's choices keep their array for the next chunk's: a chunk's values do not outlive it.
func decodeChunk(data []byte, c *completionChunk) error {
	*c = completionChunk{Choices: c.Choices[:0]}
	if scanChunk(data, c) {
		return nil
	}
	// Not the kept array: encoding/json decodes into a slice's old elements without zeroing them.
	*c = completionChunk{}
	return json.Unmarshal(data, c)
}

var (
	chunkNames       = []string{"model", "system_fingerprint", "choices", "usage", "error"}
	chunkChoiceNames = []string{"index", "text", "finish_reason", "stop_reason"}
)

// scanChunk is decodeChunk's fast path: true when it read data whole, as encoding/json would
// have. Raw values are copies: data is the event reader's buffer, reused for the next event.
func scanChunk(data []byte, c *completionChunk) bool {
	s := jscan{b: data}
	return s.known(chunkNames, 1, func(f int) bool {
		switch f {
		case 0:
			return s.stringValue(&c.Model)
		case 1:
			return s.rawCopy(1, &c.SystemFingerprint)
		case 2:
			return s.chunkChoices(c)
		case 3:
			return s.rawCopy(1, &c.Usage)
		default:
			return s.rawCopy(1, &c.Error)
		}
	}) && s.end()
}

func (s *jscan) chunkChoices(c *completionChunk) bool {
	if s.next() == 'n' {
		return s.lit("null")
	}
	if c.Choices == nil {
		c.Choices = make([]chunkChoiceIn, 0, 1)
	}
	return objects(s, &c.Choices, chunkChoiceNames, func(ch *chunkChoiceIn, f int) bool {
		switch f {
		case 0:
			var n int64
			ok := s.intValue(&n) // null leaves 0
			ch.Index = int(n)
			return ok && int64(ch.Index) == n
		case 1:
			return s.stringValue(&ch.Text)
		case 2:
			return s.stringPtr(&ch.FinishReason)
		}
		return s.rawCopy(2, &ch.StopReason)
	})
}

var errTooLarge = errors.New("granitestage: answer over the bound")

// readAll reads r to its end into buf, and fails with errTooLarge past max bytes.
func readAll(r io.Reader, buf []byte, limit int) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(512, len(buf)))
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit+1)])
		buf = buf[:len(buf)+n]
		switch {
		case len(buf) > limit:
			return buf, errTooLarge
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, err
		}
	}
}

// maxPooledBuffer bounds the read buffers a stage keeps for its next answers.
const maxPooledBuffer = 1 << 20

// buffers are a stage's reusable byte buffers: the reads of upstream answers.
type buffers struct{ p sync.Pool }

func (b *buffers) get() *[]byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return v
	}
	return new([]byte)
}

func (b *buffers) put(v *[]byte) {
	if cap(*v) <= maxPooledBuffer {
		*v = (*v)[:0]
		b.p.Put(v)
	}
}

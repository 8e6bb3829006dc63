package chattemplate

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// The engine (github.com/ardanlabs/jinja) has no hooks for limits and no way to replace a
// built-in filter, so Compile rewrites the template's source before handing it over, tag by tag,
// leaving text and line numbers as they are:
//
//   - {% for x in EXPR %} becomes {% for x in __ig_iter(EXPR) %}: every loop is charged its
//     length against Limits.MaxLoopItems, and the context is checked, before it starts;
//   - {% macro f(a, b=1) %} is followed by {% set __ig_call = __ig_enter() %}, run first on every
//     call: calls are counted against Limits.MaxMacroCalls (which bounds recursion) and the
//     context is checked;
//   - EXPR | tojson(ARGS) becomes __ig_tojson(EXPR, ARGS): transformers' tojson (Python's
//     json.dumps: key order kept, indent, separators, sort_keys, ensure_ascii), where the engine's
//     own sorts keys and escapes <, > and & when given indent;
//   - {{ 'literal' + a + b }} becomes {{ 'literal' }}{{ a }}{{ b }} (splitConcat): the same
//     output, without a string built and copied per '+' (Qwen 3's template prints every turn
//     so);
//   - Jinja2's whitespace control (trim_blocks, lstrip_blocks, '-' and '+' marks, one trailing
//     newline dropped) is applied here, and the text between tags handed over as string
//     literals, since the engine's own rules go wrong where a block tag touches an expression.
//
// Filter and test names are checked against the engine's, so a template that uses one the engine
// lacks fails at Compile rather than on the first request that reaches it.

const (
	iterFunc   = "__ig_iter"
	enterFunc  = "__ig_enter"
	callParam  = "__ig_call"
	tojsonFunc = "__ig_tojson"
)

type tagKind int

const (
	tagExpr tagKind = iota
	tagStmt
	tagComment
	tagRaw // {% raw %}...{% endraw %}: [cstart, cend) is the literal text between them
)

// tag is one {{ }}, {% %} or {# #} of a source: [start, end) the whole tag, [cstart, cend) its
// content between the delimiters and their '-' trim markers.
type tag struct {
	kind                     tagKind
	start, end, cstart, cend int
	left, right              byte // the whitespace-control marks: '-', '+' or 0
}

// scanTags finds the tags as the engine's scanner does: a tag opens at "{{", "{%" or "{#" and
// closes at the first matching closer outside a quoted string (comments: the first "#}").
func scanTags(src string) ([]tag, error) {
	var tags []tag
	for i := 0; i+1 < len(src); {
		if src[i] != '{' {
			i++
			continue
		}
		var kind tagKind
		var closer string
		switch src[i+1] {
		case '{':
			kind, closer = tagExpr, "}}"
		case '%':
			kind, closer = tagStmt, "%}"
		case '#':
			kind, closer = tagComment, "#}"
		default:
			i++
			continue
		}
		t := tag{kind: kind, start: i}
		j := i + 2
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			t.left = src[j]
			j++
		}
		t.cstart = j
		found := false
		depth := 0 // Jinja2 does not end a tag inside brackets: {{ {'a': {}} }}
		for j < len(src) {
			c := src[j]
			if kind != tagComment {
				switch c {
				case '(', '[', '{':
					depth++
				case ')', ']':
					depth--
				case '}':
					if depth > 0 {
						depth--
						j++
						continue
					}
				}
			}
			if kind != tagComment && (c == '\'' || c == '"') {
				j++
				for j < len(src) && src[j] != c {
					if src[j] == '\\' && j+1 < len(src) {
						j++
					}
					j++
				}
				if j < len(src) {
					j++
				}
				continue
			}
			if depth > 0 {
				j++
				continue
			}
			if (c == '-' || c == '+') && j+2 < len(src) && src[j+1] == closer[0] && src[j+2] == closer[1] {
				t.cend, t.end, t.right, found = j, j+3, c, true
				break
			}
			if j+1 < len(src) && c == closer[0] && src[j+1] == closer[1] {
				t.cend, t.end, found = j, j+2, true
				break
			}
			j++
		}
		if !found {
			return nil, &SyntaxError{Msg: fmt.Sprintf("unclosed tag at line %d", lineOf(src, i))}
		}
		if kind == tagStmt && strings.TrimSpace(src[t.cstart:t.cend]) == "raw" {
			// Everything up to {% endraw %} is text.
			m := endraw.FindStringSubmatchIndex(src[t.end:])
			if m == nil {
				return nil, &SyntaxError{Msg: fmt.Sprintf("line %d: raw block without endraw", lineOf(src, i))}
			}
			inner := t.right // '-' after raw strips the text's leading whitespace
			t.kind, t.cstart, t.cend = tagRaw, t.end, t.end+m[0]
			if inner == '-' {
				t.cstart = t.cend - len(strings.TrimLeftFunc(src[t.cstart:t.cend], pyIsSpace))
			}
			switch src[t.end+m[2] : t.end+m[3]] {
			case "-": // {%- endraw
				t.cend = t.cstart + len(strings.TrimRightFunc(src[t.cstart:t.cend], pyIsSpace))
			case "": // lstrip_blocks
				text := src[t.cstart:t.cend]
				if lpos := strings.LastIndexByte(text, '\n') + 1; lpos > 0 && lpos < len(text) && strings.TrimLeftFunc(text[lpos:], pyIsSpace) == "" {
					t.cend = t.cstart + lpos
				}
			}
			t.right = 0
			if m[5] > m[4] {
				t.right = src[t.end+m[4]]
			}
			t.end += m[1]
		}
		tags = append(tags, t)
		i = t.end
	}
	return tags, nil
}

var endraw = regexp.MustCompile(`\{%([-+]?)\s*endraw\s*([-+]?)%\}`)

func lineOf(src string, pos int) int { return 1 + strings.Count(src[:pos], "\n") }

type tokKind int

const (
	tokName tokKind = iota
	tokString
	tokNumber
	tokOp
)

type token struct {
	kind       tokKind
	start, end int // offsets in the tag content
	text       string
}

// lexExpr splits a tag's content into names, strings, numbers and operators (one character
// each, but for the two-character ones, which never matter here).
func lexExpr(s string) []token {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				j++
			}
			if j < len(s) {
				j++
			}
			toks = append(toks, token{tokString, i, j, s[i:j]})
			i = j
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			toks = append(toks, token{tokName, i, j, s[i:j]})
			i = j
		case c >= '0' && c <= '9':
			j := i + 1
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == '_') {
				j++
			}
			toks = append(toks, token{tokNumber, i, j, s[i:j]})
			i = j
		default:
			toks = append(toks, token{tokOp, i, i + 1, s[i : i+1]})
			i++
		}
	}
	return toks
}

// keywords end an operand when scanning back from a filter's '|'.
var keywords = map[string]bool{
	"and": true, "or": true, "not": true, "in": true, "is": true, "if": true, "else": true,
	"elif": true, "for": true, "recursive": true, "set": true, "with": true, "without": true,
	"import": true, "from": true, "as": true, "macro": true, "call": true, "filter": true,
}

func isOpen(t token) bool {
	return t.kind == tokOp && (t.text == "(" || t.text == "[" || t.text == "{")
}
func isClose(t token) bool {
	return t.kind == tokOp && (t.text == ")" || t.text == "]" || t.text == "}")
}
func isOp(t token, op string) bool {
	return t.kind == tokOp && t.text == op
}

// matchBack returns the index of the bracket that opens the one closed at toks[i], or -1.
func matchBack(toks []token, i int) int {
	depth := 0
	for ; i >= 0; i-- {
		switch {
		case isClose(toks[i]):
			depth++
		case isOpen(toks[i]):
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// matchForward returns the index of the bracket that closes the one opened at toks[i], or -1.
func matchForward(toks []token, i int) int {
	depth := 0
	for ; i < len(toks); i++ {
		switch {
		case isOpen(toks[i]):
			depth++
		case isClose(toks[i]):
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// operandStart returns the index of the first token of the operand of the filter whose '|' is
// toks[pipe]: a primary with its attribute, subscript and call suffixes and the filters already
// applied to it (filters bind tighter than every operator). -1 when it cannot tell.
func operandStart(toks []token, pipe int) int {
	i := pipe - 1
	for i >= 0 {
		t := toks[i]
		switch {
		case isClose(t):
			j := matchBack(toks, i)
			if j < 0 {
				return -1
			}
			if (toks[j].text == "(" || toks[j].text == "[") && j > 0 {
				p := toks[j-1]
				if p.kind == tokName && !keywords[p.text] || p.kind == tokString || isClose(p) {
					i = j - 1 // a call or a subscript: go on with what is called
					continue
				}
			}
			return precededByFilter(toks, j)
		case t.kind == tokName && !keywords[t.text], t.kind == tokString, t.kind == tokNumber:
			if i > 0 && isOp(toks[i-1], ".") && t.kind == tokName {
				i -= 2
				continue
			}
			return precededByFilter(toks, i)
		default:
			return -1
		}
	}
	return -1
}

// precededByFilter: the primary at toks[i] may itself be a filter name after a '|' (x | f | tojson
// is tojson(f(x))), in which case the operand goes on further back.
func precededByFilter(toks []token, i int) int {
	if i > 0 && isOp(toks[i-1], "|") && toks[i].kind == tokName {
		return operandStart(toks, i-1)
	}
	return i
}

// rewriteTojson replaces every EXPR | tojson(ARGS) of a tag's content with __ig_tojson(EXPR, ARGS).
// An occurrence whose operand it cannot delimit is left to the engine's own tojson.
func rewriteTojson(content string) string {
	for range 1000 {
		toks := lexExpr(content)
		done := true
		for q := 1; q < len(toks); q++ {
			if toks[q].kind != tokName || toks[q].text != "tojson" || !isOp(toks[q-1], "|") {
				continue
			}
			start := operandStart(toks, q-1)
			if start < 0 {
				continue
			}
			end := toks[q].end
			args := ""
			if q+1 < len(toks) && isOp(toks[q+1], "(") {
				c := matchForward(toks, q+1)
				if c < 0 {
					continue
				}
				args = strings.TrimSpace(content[toks[q+1].end:toks[c].start])
				end = toks[c].end
			}
			operand := content[toks[start].start:toks[q-2].end]
			repl := tojsonFunc + "(" + operand
			if args != "" {
				repl += ", " + args
			}
			repl += ")"
			content = content[:toks[start].start] + repl + content[end:]
			done = false
			break
		}
		if done {
			break
		}
	}
	return content
}

// rewriteFor wraps the iterable of a for statement: for TARGET in EXPR [if COND] [recursive].
func rewriteFor(content string, toks []token) string {
	in := -1
	depth := 0
	for i := 1; i < len(toks); i++ {
		switch {
		case isOpen(toks[i]):
			depth++
		case isClose(toks[i]):
			depth--
		case depth == 0 && toks[i].kind == tokName && toks[i].text == "in":
			in = i
		}
		if in >= 0 {
			break
		}
	}
	if in < 0 || in+1 >= len(toks) {
		return content
	}
	end := len(toks)
	depth = 0
	for i := in + 1; i < len(toks); i++ {
		switch {
		case isOpen(toks[i]):
			depth++
		case isClose(toks[i]):
			depth--
		case depth == 0 && toks[i].kind == tokName && (toks[i].text == "if" || toks[i].text == "recursive"):
			end = i
		}
		if end < len(toks) {
			break
		}
	}
	if end == in+1 {
		return content
	}
	a, b := toks[in+1].start, toks[end-1].end
	return content[:a] + iterFunc + "(" + content[a:b] + ")" + content[b:]
}

// rewriteMacro makes every call of macro NAME(PARAMS) count itself, first thing in its body.
func rewriteMacro(content string, toks []token) string {
	if len(toks) < 4 || toks[1].kind != tokName || !isOp(toks[2], "(") {
		return content
	}
	c := matchForward(toks, 2)
	if c < 0 {
		return content
	}
	// A statement at the top of the body, not a parameter's default: a call that passes more
	// arguments than the macro declares would fill such a parameter and skip the count.
	return content + " %}{% set " + callParam + " = " + enterFunc + "()"
}

// The engine's filters and tests (github.com/ardanlabs/jinja v1.8.0), for the Compile-time check.
var (
	engineFilters = setOf("tojson from_json fromjson items join default d trim lower upper title capitalize first last length count reverse sort unique list int float string safe replace round abs map select reject selectattr rejectattr indent wordcount escape e dictsort max min sum batch")
	engineTests   = setOf("defined undefined none boolean integer float number string mapping iterable sequence callable true false eq equalto ne gt greaterthan ge lt lessthan le in odd even upper lower sameas")
)

func setOf(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

var blockOpeners = setOf("for if macro call filter block with autoescape raw generation")

// preprocessed is a source made ready for the engine, with what Compile learned of it.
type preprocessed struct {
	source        string
	contentFormat ContentFormat
}

func preprocess(src string, lim *Limits, splitOutputs bool) (*preprocessed, error) {
	if len(src) > lim.MaxTemplateBytes {
		return nil, &LimitError{Limit: "MaxTemplateBytes", Max: lim.MaxTemplateBytes}
	}
	// Jinja2 reads "\r\n" and "\r" as "\n", and drops one trailing newline.
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(strings.ReplaceAll(src, "\r\n", "\n"), "\r", "\n")
	}
	src = strings.TrimSuffix(src, "\n")
	tags, err := scanTags(src)
	if err != nil {
		return nil, err
	}
	out := &preprocessed{contentFormat: FormatString}
	var b strings.Builder
	b.Grow(len(src) + len(src)/4)
	prevEnd := 0
	lineStarting := true // Jinja2's: the last thing read ended a line (or nothing was read yet)
	nesting := 0
	for i := range tags {
		t := &tags[i]
		writeText(&b, whitespace(src[prevEnd:t.start], t, lineStarting))
		content := src[t.cstart:t.cend]
		switch t.kind {
		case tagComment:
			b.WriteString("{#" + content + "#}")
		case tagRaw:
			writeText(&b, content)
		default:
			toks := lexExpr(content)
			if err := checkNames(toks, src, *t, lim); err != nil {
				return nil, err
			}
			if t.kind == tagStmt && len(toks) == 1 && (toks[0].text == "generation" || toks[0].text == "endgeneration") {
				// transformers' {% generation %} marks the assistant's text for training masks;
				// rendering a prompt, it is a block that renders its body.
				prevEnd, lineStarting = afterTag(src, t)
				continue
			}
			if t.kind == tagStmt && len(toks) > 0 && toks[0].kind == tokName {
				word := toks[0].text
				switch {
				case blockOpeners[word] || word == "set" && !hasTopLevelOp(toks, "="):
					nesting++
					if nesting > lim.MaxNesting {
						return nil, &LimitError{Limit: "MaxNesting", Max: lim.MaxNesting}
					}
				case strings.HasPrefix(word, "end"):
					nesting--
				}
				switch word {
				case "for":
					if iteratesContent(toks) {
						out.contentFormat = FormatOpenAI
					}
					content = rewriteFor(content, toks)
				case "macro":
					content = rewriteMacro(content, toks)
				}
			}
			if strings.Contains(content, "tojson") {
				content = rewriteTojson(content)
			}
			if t.kind == tagExpr {
				parts := []string{content}
				if splitOutputs {
					parts = splitConcat(content)
				}
				for _, part := range parts {
					// Spaced, so that the engine reads no trim mark in the content's first or
					// last character, nor a closer in its "}}".
					b.WriteString("{{ " + separateBraces(part) + " }}")
				}
			} else {
				content = separateBraces(content)
				b.WriteString("{% " + content + " %}")
			}
		}
		prevEnd, lineStarting = afterTag(src, t)
	}
	writeText(&b, src[prevEnd:])
	out.source = b.String()
	return out, nil
}

// splitConcat splits an output tag's expression 'literal' + a + b ... into its operands, which
// the template prints one after the other: {{ '<|im_start|>' + message.role + '\n' }} as
// {{ '<|im_start|>' }}{{ message.role }}{{ '\n' }}. The engine builds the whole string first,
// one allocation and copy per '+' (a fifth of rendering Qwen 3's template), and prints it; with
// a string literal first, every '+' of the chain joins the printed forms of its operands, so
// the output is the same. Anything else (no literal first, another operator at the top level
// with '+': '-', '~', a comparison, and, or, not, in, is, if; a float with an exponent, whose
// '+' the engine reads as part of the number) is left whole.
func splitConcat(content string) []string {
	toks := lexExpr(content)
	if len(toks) < 3 || toks[0].kind != tokString || !isOp(toks[1], "+") {
		return []string{content}
	}
	var cuts []int // indices of the top-level '+'
	depth := 0
	for i, t := range toks {
		switch {
		case isOpen(t):
			depth++
		case isClose(t):
			depth--
		case t.kind == tokNumber && i+1 < len(toks) && toks[i+1].kind == tokName && toks[i+1].start == t.end:
			return []string{content} // 1.5e+3
		case depth > 0:
		case t.kind == tokName && keywords[t.text]:
			return []string{content}
		case t.kind == tokOp:
			switch t.text {
			case "+":
				cuts = append(cuts, i)
			case ".", "|", "*", "/", "%": // bind tighter than '+': inside an operand
			default:
				return []string{content}
			}
		}
	}
	parts := make([]string, 0, len(cuts)+1)
	start := 0
	for _, c := range cuts {
		if c == 0 || c+1 >= len(toks) || isOp(toks[c-1], "+") || isOp(toks[c+1], "+") {
			return []string{content} // an operand missing, or a unary '+'
		}
		parts = append(parts, content[start:toks[c].start]) // spaces and newlines kept: line numbers
		start = toks[c].end
	}
	return append(parts, content[start:])
}

// afterTag returns where the text after t starts, and whether it starts a line: t's closer takes
// with it, with trim_blocks, a block's or comment's "\n", and with '-' all the whitespace after it.
func afterTag(src string, t *tag) (int, bool) {
	end := t.end
	switch {
	case t.right == '-':
		taken := len(src) - end - len(strings.TrimLeftFunc(src[end:], pyIsSpace))
		return end + taken, taken > 0 && src[end+taken-1] == '\n'
	case t.kind != tagExpr && t.right != '+' && strings.HasPrefix(src[end:], "\n"):
		return end + 1, true
	}
	return end, false
}

// whitespace applies the next tag's side of Jinja2's whitespace control to the text before it
// (the previous tag's side was applied as it was read): '-' strips all whitespace, and
// lstrip_blocks the indentation before a block or comment that starts its line ('+' keeps it).
func whitespace(text string, next *tag, lineStarting bool) string {
	switch {
	case next.left == '-':
		return strings.TrimRightFunc(text, pyIsSpace)
	case next.left != '+' && next.kind != tagExpr:
		lpos := strings.LastIndexByte(text, '\n') + 1
		if (lpos > 0 || lineStarting) && lpos < len(text) && strings.TrimLeftFunc(text[lpos:], pyIsSpace) == "" {
			return text[:lpos]
		}
	}
	return text
}

// writeText hands text to the engine as a string literal, {{ '...' }}: the engine then has no
// text of its own to apply its whitespace rules to (they differ from Jinja2's where a block tag
// touches an expression: {% for %}{{ x }}\n{% endfor %} loses its "\n").
func writeText(b *strings.Builder, text string) {
	if text == "" {
		return
	}
	b.WriteString("{{ '")
	for i := 0; i < len(text); i++ {
		switch c := text[i]; c {
		case '\\', '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString("' }}")
}

// separateBraces puts a space between two closing braces outside strings ({'a': {}} -> {'a': {} }),
// which the engine's scanner would take for the end of the tag.
func separateBraces(content string) string {
	if !strings.Contains(content, "}}") {
		return content
	}
	toks := lexExpr(content)
	var b strings.Builder
	prev := 0
	for i := 1; i < len(toks); i++ {
		if isOp(toks[i], "}") && isOp(toks[i-1], "}") && toks[i].start == toks[i-1].end {
			b.WriteString(content[prev:toks[i].start])
			b.WriteByte(' ')
			prev = toks[i].start
		}
	}
	b.WriteString(content[prev:])
	return b.String()
}

// pyIsSpace is Python's str.isspace, which Jinja2's whitespace control uses.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

func hasTopLevelOp(toks []token, op string) bool {
	depth := 0
	for _, t := range toks {
		switch {
		case isOpen(t):
			depth++
		case isClose(t):
			depth--
		case depth == 0 && isOp(t, op):
			return true
		}
	}
	return false
}

// checkNames rejects filters and tests the engine does not have, and brackets nested deeper than
// MaxNesting (the engine's parser recurses on them).
func checkNames(toks []token, src string, t tag, lim *Limits) error {
	depth := 0
	for i, tk := range toks {
		switch {
		case isOpen(tk):
			depth++
			if depth > lim.MaxNesting {
				return &LimitError{Limit: "MaxNesting", Max: lim.MaxNesting}
			}
		case isClose(tk):
			depth--
		case tk.kind == tokName && i > 0 && isOp(toks[i-1], "|") && !engineFilters[tk.text]:
			return &SyntaxError{Msg: fmt.Sprintf("line %d: unknown filter %q", lineOf(src, t.start), tk.text)}
		case tk.kind == tokName && i > 0 && (toks[i-1].text == "is" || toks[i-1].text == "not" && i > 1 && toks[i-2].text == "is") &&
			toks[i-1].kind == tokName && tk.text != "not" && !engineTests[tk.text]:
			return &SyntaxError{Msg: fmt.Sprintf("line %d: unknown test %q", lineOf(src, t.start), tk.text)}
		}
	}
	if t.kind == tagStmt && len(toks) > 1 && toks[0].text == "filter" && toks[1].kind == tokName && !engineFilters[toks[1].text] {
		return &SyntaxError{Msg: fmt.Sprintf("line %d: unknown filter %q", lineOf(src, t.start), toks[1].text)}
	}
	return nil
}

// iteratesContent tells vLLM's "openai" content format from "string": the template loops over a
// message's content (for part in message['content']), so it expects a list of parts.
func iteratesContent(toks []token) bool {
	in := -1
	for i, t := range toks {
		if t.kind == tokName && t.text == "in" {
			in = i
			break
		}
	}
	if in < 0 {
		return false
	}
	for i := in + 1; i < len(toks); i++ {
		t := toks[i]
		if t.kind == tokName && (t.text == "if" || t.text == "recursive") {
			break
		}
		if t.kind == tokName && t.text == "content" && i > 0 && isOp(toks[i-1], ".") ||
			t.kind == tokString && (t.text == "'content'" || t.text == `"content"`) && i > 0 && isOp(toks[i-1], "[") {
			return true
		}
	}
	return false
}

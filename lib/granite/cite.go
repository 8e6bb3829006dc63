package granite

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Citations and hallucinations, as granite-io's output parsers read them. The model writes
//
//	answer with inline markers          3.2: <co>1</co>    3.3: <|start_of_cite|>{"document_id": "1"}<|end_of_cite|>
//	section header                      3.2: # Citations:  3.3: {"id": "citation"} (inside plugin tokens)
//	1 line per citation                 3.2: <co>1</co> Document 0: "quote"   3.3: 1: "quote"
//	section header                      3.2: # Hallucinations:  3.3: {"id": "hallucination"}
//	1. Risk low: a sentence of the answer
//
// Inconsistencies (unknown documents, quotes not found, unbalanced markers) leave zero offsets
// where granite-io logs a warning; where granite-io raises, the parse fails with an error.

const (
	citeHeader32   = "# Citations:"
	hallucHeader32 = "# Hallucinations:"
	citeHeader33   = `{"id": "citation"}`
	hallucHeader33 = `{"id": "hallucination"}`
	pluginStart    = "<|start_of_plugin|>"
	pluginEnd      = "<|end_of_plugin|>"
)

var (
	// The 3.2 markers, citation lines and hallucination items are read by hand (findCo,
	// citeLine32, hallucHeads, hallucItem: what these regular expressions would match, which
	// the tests check), as they run over every answer:
	//
	//	<co>(\d+)</co>
	//	(?s)<co>(\d+)</co>\s*Document (\d+): "(.+)$
	//	(\d+)\.\s*Risk (low|high|unanswerable):
	//	(?s)(\d+)\.\s*Risk (low|high|unanswerable): (.+)$
	reCite33       = regexp.MustCompile(`<\|start_of_cite\|>\{"document_id": "(\d+)"\}<\|end_of_cite\|>`)
	reCiteLine33   = regexp.MustCompile(`(\d+):(.+)`)
	reLeakedDocID  = regexp.MustCompile(` \{"document_id": "\d+"\}`)
	reLeakedHeader = regexp.MustCompile(`\{"id": "(citation|hallucination)"\}`)
	reTrailPunct   = regexp.MustCompile(`[.?:;]+$`)

	errParse   = errors.New("failed to parse citations, documents and hallucinations from model output")
	errTooLong = errors.New("completion too long to parse its citations, documents and hallucinations")
)

type parsedOutput struct {
	response       string
	citations      []Citation
	docs           []CitedDocument
	hallucinations []Hallucination
}

// splitSections cuts the text at the two headers (either order, both optional). A header
// that appears twice is an error, as Python's two-way unpacking of str.split raises there.
func splitSections(text, citeHead, hallucHead string) (resp, cites, halluc string, err error) {
	hasC, hasH := strings.Contains(text, citeHead), strings.Contains(text, hallucHead)
	split2 := func(s, sep string) (string, string, error) {
		if strings.Count(s, sep) != 1 {
			return "", "", errParse
		}
		a, b, _ := strings.Cut(s, sep)
		return a, b, nil
	}
	switch {
	case hasH && !hasC:
		resp, halluc, err = split2(text, hallucHead)
	case hasC && !hasH:
		resp, cites, err = split2(text, citeHead)
	case hasC && hasH:
		var pre, post string
		if pre, post, err = split2(text, citeHead); err != nil {
			break
		}
		if strings.Contains(pre, hallucHead) {
			resp, halluc, err = split2(pre, hallucHead)
			cites = post
		} else {
			cites, halluc, err = split2(post, hallucHead)
			resp = pre
		}
	default:
		resp = text
	}
	return resp, cites, halluc, err
}

// parse32 is granite-io's Granite 3.2 parse_model_output. Where granite-io raises, or when long
// says not to parse the sections, the error comes with the content unparsed makes.
func parse32(text string, inputDocs []Document, long bool) (parsedOutput, error) {
	fail := func(err error) (parsedOutput, error) {
		return parsedOutput{response: unparsed(text, citeHeader32, hallucHeader32, clean32)}, err
	}
	resp, citesText, hallucText, err := splitSections(text, citeHeader32, hallucHeader32)
	if err != nil {
		return fail(err)
	}
	if long && len(resp) < len(text) {
		return fail(errTooLong)
	}
	resp, citesText, hallucText = pyStrip(resp), pyStrip(citesText), pyStrip(hallucText)

	docs := docsFromCitations32(citesText)
	alignDocsWithInput(docs, inputDocs)
	clean := pyStrip(removeCo(resp))
	out := parsedOutput{response: clean}

	if hallucText != "" {
		out.hallucinations = parseHallucinations(hallucText, clean, removeCo)
	}
	if citesText != "" {
		cites := parseCitations32(citesText)
		addContextSpans(cites, docs)
		if err := addResponseSpans32(cites, resp, clean); err != nil {
			return fail(err)
		}
		out.citations = cites
	}
	out.docs = nonEmpty(docs)
	out.citations = nonEmpty(out.citations)
	out.hallucinations = nonEmpty(out.hallucinations)
	return out, nil
}

// clean32 is a Granite 3.2 answer's content: its citation markers removed, stripped.
func clean32(resp string) string { return pyStrip(removeCo(pyStrip(resp))) }

// clean33 is a Granite 3.3 answer's content (with controls): plugin tokens and citation markers
// removed, stripped, in granite-io's order.
func clean33(resp string) string {
	plugins := func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(s, pluginStart, ""), pluginEnd, "")
	}
	return pyStrip(pyStrip(reCite33.ReplaceAllLiteralString(plugins(pyStrip(plugins(resp))), "")))
}

// unparsed is the content of an answer whose sections could not be parsed (granite-io raises
// there): the answer before the first section header, cleaned as a parsed answer is, then the
// model's text from that header on, as written, after the whitespace the model put before it
// (a blank line if none). Nothing the model wrote is lost, and the answer reads as it streamed:
// a stream lets the answer out, cleaned, before it can know whether the sections will parse.
func unparsed(text, citeHead, hallucHead string, clean func(string) string) string {
	h := len(text)
	for _, head := range [...]string{citeHead, hallucHead} {
		if i := strings.Index(text, head); i >= 0 && i < h {
			h = i
		}
	}
	answer := clean(text[:h])
	switch {
	case h == len(text):
		return answer
	case answer == "":
		return text[h:]
	}
	sep := text[len(strings.TrimRightFunc(text[:h], isPySpace)):h]
	if sep == "" {
		sep = "\n\n"
	}
	return answer + sep + text[h:]
}

// parse33 is granite-io's Granite 3.3 parse_model_output; errors and long as for parse32.
func parse33(text string, req *ChatRequest, long bool) (parsedOutput, error) {
	if req.Controls == nil {
		// No controls asked for: 3.3 sometimes writes citation sections anyway (granite-io
		// issue #173); drop them and the stray document ids instead of parsing. The text
		// before a dropped section loses its trailing whitespace only (granite-io strips both
		// ends; a stream has let the leading whitespace out before it can know whether a
		// section follows).
		clean := reLeakedDocID.ReplaceAllLiteralString(text, "")
		if loc := reLeakedHeader.FindStringIndex(clean); loc != nil {
			clean = strings.TrimRightFunc(clean[:loc[0]], isPySpace)
		}
		return parsedOutput{response: clean}, nil
	}
	fail := func(err error) (parsedOutput, error) {
		return parsedOutput{response: unparsed(text, citeHeader33, hallucHeader33, clean33)}, err
	}
	resp, citesText, hallucText, err := splitSections(text, citeHeader33, hallucHeader33)
	if err != nil {
		return fail(err)
	}
	if long && len(resp) < len(text) {
		return fail(errTooLong)
	}
	strip := func(s string) string {
		return pyStrip(strings.ReplaceAll(strings.ReplaceAll(s, pluginStart, ""), pluginEnd, ""))
	}
	resp, citesText, hallucText = strip(resp), strip(citesText), strip(hallucText)
	removeCites := func(s string) string {
		s = strings.ReplaceAll(strings.ReplaceAll(s, pluginStart, ""), pluginEnd, "")
		return pyStrip(reCite33.ReplaceAllLiteralString(s, ""))
	}

	docs := docsFromCitations33(citesText)
	alignDocsWithInput(docs, req.Documents)
	clean := pyStrip(removeCites(resp))
	out := parsedOutput{response: clean}

	if hallucText != "" {
		out.hallucinations = parseHallucinations(hallucText, clean, removeCites)
	}
	if citesText != "" {
		cites := parseCitations33(citesText)
		addContextSpans(cites, docs)
		out.citations = addResponseSpans33(cites, resp, clean, removeCites)
	}
	out.docs = nonEmpty(docs)
	out.citations = nonEmpty(out.citations)
	out.hallucinations = nonEmpty(out.hallucinations)
	return out, nil
}

func nonEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// chunks cuts text at each match start of re; each chunk runs to one character before the next
// match (granite-io drops the separator that way).
func chunks(text string, re *regexp.Regexp) []string {
	locs := re.FindAllStringIndex(text, -1)
	starts := make([]int, len(locs))
	for i, l := range locs {
		starts[i] = l[0]
	}
	return chunksAt(text, starts)
}

// chunksAt is chunks for the match starts given.
func chunksAt(text string, starts []int) []string {
	out := make([]string, 0, len(starts))
	for i, start := range starts {
		end := len(text)
		if i+1 < len(starts) {
			end = max(starts[i+1]-1, start)
		}
		out = append(out, text[start:end])
	}
	return out
}

func parseHallucinations(text, response string, clean func(string) string) []Hallucination {
	var out []Hallucination
	for _, c := range chunksAt(text, hallucHeads(text)) {
		id, risk, rest, ok := hallucItem(c)
		if !ok {
			continue
		}
		h := Hallucination{HallucinationID: id, Risk: risk, ResponseText: rest}
		t := clean(rest)
		if i := strings.Index(response, t); i >= 0 {
			h.ResponseText = t
			h.ResponseBegin = runeIndex(response, i)
			h.ResponseEnd = h.ResponseBegin + runeIndex(t, len(t))
		}
		out = append(out, h)
	}
	return out
}

// isReSpace is RE2's \s: ASCII whitespace without \v.
func isReSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

func digitsAt(s string, i int) int {
	j := i
	for j < len(s) && '0' <= s[j] && s[j] <= '9' {
		j++
	}
	return j
}

// hallucHead matches (\d+)\.\s*Risk (low|high|unanswerable): at s[i:] (i the start of
// the digits): the risk and the match's end, or end -1.
func hallucHead(s string, i int) (risk string, end int) {
	j := digitsAt(s, i)
	if j == i || j >= len(s) || s[j] != '.' {
		return "", -1
	}
	j++
	for j < len(s) && isReSpace(s[j]) {
		j++
	}
	if !strings.HasPrefix(s[j:], "Risk ") {
		return "", -1
	}
	j += len("Risk ")
	for _, r := range [...]string{"low", "high", "unanswerable"} {
		if strings.HasPrefix(s[j:], r) && strings.HasPrefix(s[j+len(r):], ":") {
			return r, j + len(r) + 1
		}
	}
	return "", -1
}

// hallucHeads are the starts of the non-overlapping matches of
// (\d+)\.\s*Risk (low|high|unanswerable): in s, leftmost first. A match starts where a run of
// digits does (a later start in the run would reach the same end, so the run's first wins).
func hallucHeads(s string) []int {
	var out []int
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], "Risk ")
		if j < 0 {
			break
		}
		// The digits of a match end at a '.' before the spaces before "Risk ".
		k := i + j
		for k > i && isReSpace(s[k-1]) {
			k--
		}
		if k > i && s[k-1] == '.' {
			d := k - 1
			for d > i && '0' <= s[d-1] && s[d-1] <= '9' {
				d--
			}
			if d < k-1 {
				if _, end := hallucHead(s, d); end >= 0 {
					out = append(out, d)
					i = end
					continue
				}
			}
		}
		i += j + 1
	}
	return out
}

// hallucItem matches (?s)(\d+)\.\s*Risk (low|high|unanswerable): (.+)$ in a chunk that starts
// with a head match (no other head starts inside one, so only the head's match can match).
func hallucItem(c string) (id, risk, rest string, ok bool) {
	risk, end := hallucHead(c, 0)
	if end < 0 || end+1 >= len(c) || c[end] != ' ' {
		return "", "", "", false
	}
	return c[:digitsAt(c, 0)], risk, c[end+1:], true
}

func parseCitations32(text string) []Citation {
	var out []Citation
	cos := findCo(text)
	starts := make([]int, len(cos))
	for i, m := range cos {
		starts[i] = m[0]
	}
	for _, c := range chunksAt(text, starts) {
		if cid, did, rest, ok := citeLine32(c); ok {
			out = append(out, Citation{CitationID: cid, DocID: did, ContextText: strings.TrimSuffix(rest, `"`)})
		}
	}
	return out
}

// citeLine32 matches (?s)<co>(\d+)</co>\s*Document (\d+): "(.+)$ in a chunk that starts with a
// <co>N</co> marker (no other marker starts inside it, so only that one can match).
func citeLine32(c string) (cid, did, rest string, ok bool) {
	if !strings.HasPrefix(c, "<co>") {
		return "", "", "", false
	}
	j := digitsAt(c, 4)
	if j == 4 || !strings.HasPrefix(c[j:], "</co>") {
		return "", "", "", false
	}
	cid = c[4:j]
	j += 5
	for j < len(c) && isReSpace(c[j]) {
		j++
	}
	if !strings.HasPrefix(c[j:], "Document ") {
		return "", "", "", false
	}
	j += len("Document ")
	k := digitsAt(c, j)
	if k == j || !strings.HasPrefix(c[k:], `: "`) || k+3 >= len(c) {
		return "", "", "", false
	}
	return cid, c[j:k], c[k+3:], true
}

func parseCitations33(text string) []Citation {
	var out []Citation
	for _, c := range chunks(text, reCiteLine33) {
		// The id restarts at 0 in every chunk; addResponseSpans33 renumbers by position.
		for i, m := range reCiteLine33.FindAllStringSubmatch(c, -1) {
			ctx := strings.Trim(pyStrip(m[2]), `"`)
			out = append(out, Citation{CitationID: strconv.Itoa(i), DocID: m[1], ContextText: ctx})
		}
	}
	return out
}

func docsFromCitations32(text string) []CitedDocument {
	var out []CitedDocument
	for _, line := range pySplitLines(text) {
		if pyStrip(line) == "" {
			continue
		}
		if !strings.Contains(line, "<co>") || !strings.Contains(line, "</co>") ||
			!strings.Contains(line, "Document ") || !strings.Contains(line, ":") {
			continue
		}
		_, after, _ := strings.Cut(line, "<co>")
		cid, _, _ := strings.Cut(after, "</co>")
		cid = pyStrip(cid)
		if !isDigits(cid) {
			continue
		}
		_, after, _ = strings.Cut(line, "Document ")
		did, _, _ := strings.Cut(after, ":")
		did = pyStrip(did)
		if !isDigits(did) {
			continue
		}
		_, txt, _ := strings.Cut(line, ":")
		out = append(out, CitedDocument{CitationID: cid, DocID: did, Text: strings.Trim(pyStrip(txt), `"`)})
	}
	return out
}

func docsFromCitations33(text string) []CitedDocument {
	var out []CitedDocument
	for i, line := range pySplitLines(text) {
		if pyStrip(line) == "" {
			continue
		}
		did, txt, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		did = pyStrip(did)
		if !isDigits(did) {
			continue
		}
		// The line number is the citation id, blank lines counted.
		out = append(out, CitedDocument{CitationID: strconv.Itoa(i), DocID: did, Text: strings.Trim(pyStrip(txt), `"`)})
	}
	return out
}

// alignDocsWithInput replaces a quoted document text by the request's full document when the
// quote is part of it, so context offsets point into the real document.
func alignDocsWithInput(docs []CitedDocument, input []Document) {
	for i := range docs {
		for _, in := range input {
			full := pyStrip(in.Text)
			if strings.Contains(full, pyStrip(docs[i].Text)) {
				docs[i].Text = full
			}
		}
	}
}

func addContextSpans(cites []Citation, docs []CitedDocument) {
	byKey := make(map[string]*CitedDocument, len(docs))
	for i := range docs {
		byKey[docs[i].CitationID+"-"+docs[i].DocID] = &docs[i]
	}
	for i := range cites {
		c := &cites[i]
		c.ContextBegin, c.ContextEnd = 0, 0
		d, ok := byKey[c.CitationID+"-"+c.DocID]
		if !ok {
			continue
		}
		if j := strings.Index(d.Text, c.ContextText); j >= 0 {
			c.ContextBegin = runeIndex(d.Text, j)
			c.ContextEnd = c.ContextBegin + runeIndex(c.ContextText, len(c.ContextText))
		}
	}
}

func addResponseSpans32(cites []Citation, withMarks, clean string) error {
	sents := splitSentences(withMarks)
	removeMarks := removeCo
	byID := map[string]string{}
	for si, s := range sents {
		for m, ok := nextCo(s, 0); ok; m, ok = nextCo(s, m[3]) {
			id := s[m[1]:m[2]]
			if _, seen := byID[id]; seen {
				continue
			}
			sent := removeMarks(s)
			if m[0] == 0 || sent == "" {
				if si == 0 {
					continue
				}
				sent = removeMarks(sents[si-1])
			}
			byID[id] = sent
		}
	}
	for i := range cites {
		c := &cites[i]
		rt, ok := byID[c.CitationID]
		if !ok {
			continue
		}
		matches := findAll(clean, rt)
		switch {
		case len(matches) == 0:
			continue
		case len(matches) == 1:
			c.ResponseText = rt
			c.ResponseBegin = runeIndex(clean, matches[0])
			c.ResponseEnd = c.ResponseBegin + runeIndex(rt, len(rt))
			continue
		}
		// The sentence occurs more than once: take its last occurrence before the marker.
		mark := strings.Index(withMarks, "<co>"+c.CitationID+"</co>")
		if mark < 0 {
			continue
		}
		before := removeMarks(withMarks[:mark])
		search := reTrailPunct.ReplaceAllLiteralString(rt, "")
		found := findAll(before, search)
		if len(found) == 0 {
			return errParse // granite-io indexes an empty list here
		}
		c.ResponseText = rt
		c.ResponseBegin = runeIndex(before, found[len(found)-1])
		c.ResponseEnd = c.ResponseBegin + runeIndex(rt, len(rt))
	}
	return nil
}

// addResponseSpans33 numbers citations by the order of their markers in the answer and
// attaches each marker's sentence. granite-io's 3.3 parser sets response_end to begin plus the
// length of the whole answer, not of the sentence; that quirk is kept so results match it.
// Markers beyond the listed citations are dropped (granite-io fails building the message).
func addResponseSpans33(cites []Citation, withMarks, clean string, removeCites func(string) string) []Citation {
	sents := splitSentences(withMarks)
	byID := map[string]string{}
	idx := 0
	for si, s := range sents {
		for _, m := range reCite33.FindAllStringIndex(s, -1) {
			id := strconv.Itoa(idx)
			if idx < len(cites) {
				cites[idx].CitationID = id
			}
			idx++
			if _, seen := byID[id]; seen {
				continue
			}
			sent := removeCites(s)
			if m[0] == 0 || sent == "" {
				if si == 0 {
					byID[id] = ""
					continue
				}
				sent = removeCites(sents[si-1])
			}
			byID[id] = sent
		}
	}
	cleanLen := runeIndex(clean, len(clean))
	for i := range cites {
		c := &cites[i]
		c.ResponseText, c.ResponseBegin, c.ResponseEnd = "", 0, 0
		rt := byID[strconv.Itoa(i)]
		j := strings.Index(clean, rt)
		if j < 0 {
			continue
		}
		c.ResponseText = rt
		c.ResponseBegin = runeIndex(clean, j)
		c.ResponseEnd = c.ResponseBegin + cleanLen
	}
	return cites
}

// findAll returns the byte offsets of the non-overlapping occurrences of sub in s.
func findAll(s, sub string) []int {
	var out []int
	step := len(sub)
	if step == 0 {
		step = 1
	}
	for off := 0; off <= len(s); {
		j := strings.Index(s[off:], sub)
		if j < 0 {
			break
		}
		out = append(out, off+j)
		off += j + step
	}
	return out
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// pySplitLines is Python's str.splitlines(): it also breaks at \v, \f, \x1c-\x1e, NEL and the
// Unicode line and paragraph separators.
func pySplitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		if r >= 0x80 {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		switch r {
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			out = append(out, s[start:i])
			i += size
			start = i
			continue
		case '\r':
			out = append(out, s[start:i])
			i++
			if i < len(s) && s[i] == '\n' {
				i++
			}
			start = i
			continue
		}
		i += size
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// removeCo deletes 3.2 citation markers with the whitespace around them, as the regular
// expression \s*<co>\d+</co>\s* does (with Python's Unicode \s); written out because Go's
// backtracker spends most of a parse on the leading \s*.
func removeCo(s string) string {
	if !strings.Contains(s, "<co>") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last, pos := 0, 0
	for {
		j := strings.Index(s[pos:], "<co>")
		if j < 0 {
			break
		}
		j += pos
		k := j + 4
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		if k == j+4 || !strings.HasPrefix(s[k:], "</co>") {
			pos = j + 4
			continue
		}
		end := k + 5
		l := j
		for l > last {
			if c := s[l-1]; c < utf8.RuneSelf {
				if !pySpaceASCII[c] {
					break
				}
				l--
				continue
			}
			r, n := utf8.DecodeLastRuneInString(s[last:l])
			if !isPySpace(r) {
				break
			}
			l -= n
		}
		for end < len(s) {
			if c := s[end]; c < utf8.RuneSelf {
				if !pySpaceASCII[c] {
					break
				}
				end++
				continue
			}
			r, n := utf8.DecodeRuneInString(s[end:])
			if !isPySpace(r) {
				break
			}
			end += n
		}
		b.WriteString(s[last:l])
		last, pos = end, end
	}
	b.WriteString(s[last:])
	return b.String()
}

// pySpaceASCII is isPySpace for ASCII bytes.
var pySpaceASCII = func() (t [utf8.RuneSelf]bool) {
	for c := range utf8.RuneSelf {
		t[c] = isPySpace(rune(c))
	}
	return t
}()

// findCo returns the 3.2 markers <co>N</co> in s as [start, id start, id end, end] (what the
// regexp <co>(\d+)</co> finds; by hand, as this runs once per sentence).
func findCo(s string) [][4]int {
	var out [][4]int
	for m, ok := nextCo(s, 0); ok; m, ok = nextCo(s, m[3]) {
		out = append(out, m)
	}
	return out
}

// nextCo is the first marker <co>N</co> at or after pos, as findCo reports it.
func nextCo(s string, pos int) ([4]int, bool) {
	for {
		j := strings.Index(s[pos:], "<co>")
		if j < 0 {
			return [4]int{}, false
		}
		j += pos
		k := j + 4
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		if k > j+4 && strings.HasPrefix(s[k:], "</co>") {
			return [4]int{j, j + 4, k, k + 5}, true
		}
		pos = j + 4
	}
}

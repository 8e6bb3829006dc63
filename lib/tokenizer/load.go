package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MaxFileBytes bounds each file Load reads (after gzip decompression): a tokenizer.json of the
// largest vocabularies in use (Gemma 3's 262k tokens) is about 33 MB.
const MaxFileBytes = 128 << 20

// Load reads dir/tokenizer.json, dir/tokenizer_config.json and, when present,
// dir/generation_config.json and dir/chat_template.jinja. Each may also be stored gzipped, with a
// .gz suffix. tokenizer_config.json is optional too: without it Config has only what
// tokenizer.json says.
func Load(dir string) (*Tokenizer, error) {
	tj, tjPath, err := readFile(dir, "tokenizer.json", true)
	if err != nil {
		return nil, err
	}
	cj, cjPath, err := readFile(dir, "tokenizer_config.json", false)
	if err != nil {
		return nil, err
	}
	gj, gjPath, err := readFile(dir, "generation_config.json", false)
	if err != nil {
		return nil, err
	}
	jinja, _, err := readFile(dir, "chat_template.jinja", false)
	if err != nil {
		return nil, err
	}
	t, err := parse(tj, tjPath, cj, cjPath, gj, gjPath)
	if err != nil {
		return nil, err
	}
	if t.cfg.ChatTemplate == "" && jinja != nil {
		t.cfg.ChatTemplate = string(jinja)
	}
	return t, nil
}

// Parse builds a Tokenizer from the contents of tokenizer.json and, optionally (nil),
// tokenizer_config.json and generation_config.json.
func Parse(tokenizerJSON, tokenizerConfigJSON, generationConfigJSON []byte) (*Tokenizer, error) {
	return parse(tokenizerJSON, "tokenizer.json", tokenizerConfigJSON, "tokenizer_config.json",
		generationConfigJSON, "generation_config.json")
}

// readFile reads dir/name or dir/name.gz, at most MaxFileBytes after decompression. A missing
// file is an error only when required; then data is nil.
func readFile(dir, name string, required bool) (data []byte, path string, err error) {
	path = filepath.Join(dir, name)
	f, err := os.Open(path)
	gz := false
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.Open(path + ".gz")
		if err == nil {
			path += ".gz"
			gz = true
		} else if errors.Is(err, fs.ErrNotExist) {
			if required {
				return nil, path, fmt.Errorf("tokenizer: %s: no such file (nor %s.gz)", path, name)
			}
			return nil, path, nil
		}
	}
	if err != nil {
		return nil, path, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if gz {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, path, fmt.Errorf("tokenizer: %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	data, err = io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, path, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, path, fmt.Errorf("tokenizer: %s: larger than %d bytes", path, MaxFileBytes)
	}
	return data, path, nil
}

// Config is what tokenizer_config.json and generation_config.json say that a gateway needs
// around the tokenizer. Token fields hold the token's text ("" when absent); ids are -1 when
// absent.
type Config struct {
	BOSToken, EOSToken, PadToken, UnkToken string
	BOSTokenID, EOSTokenID, PadTokenID     int
	// AddBOSToken and AddEOSToken are tokenizer_config.json's add_bos_token and add_eos_token, nil
	// when absent. Encode does not read them: the post-processor in tokenizer.json is what adds
	// BOS (Llama 3's TemplateProcessing), as in Hugging Face's fast tokenizers.
	AddBOSToken, AddEOSToken *bool
	// ModelMaxLength is model_max_length, 0 when absent; values beyond int's range (Llama's
	// 1e30 means "no limit") are math.MaxInt.
	ModelMaxLength int
	// ChatTemplate is the default chat template (Jinja source, not rendered here);
	// ChatTemplates has every named one when the file holds a list (the default under
	// "default"). From chat_template.jinja when tokenizer_config.json has none.
	ChatTemplate  string
	ChatTemplates map[string]string
	// EOSTokenIDs is generation_config.json's eos_token_id (a number or a list); without it, the
	// EOS token's id alone (or nothing).
	EOSTokenIDs []int
	// TokenizerClass is tokenizer_class, for example "Qwen2Tokenizer".
	TokenizerClass string
	// CleanUpTokenizationSpaces is clean_up_tokenization_spaces. Decode does not apply it (it
	// would break round trips; vLLM's detokenizer does not either).
	CleanUpTokenizationSpaces bool
}

// ---- tokenizer.json -----------------------------------------------------------------------------

type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
}

// componentJSON has the fields of the pre-tokenizers, post-processors and decoders this package
// reads.
type componentJSON struct {
	Type           string             `json:"type"`
	PreTokenizers  []json.RawMessage  `json:"pretokenizers"`
	Pattern        *patternJSON       `json:"pattern"`
	Behavior       string             `json:"behavior"`
	Invert         bool               `json:"invert"`
	AddPrefixSpace bool               `json:"add_prefix_space"`
	UseRegex       *bool              `json:"use_regex"`
	Normalizers    []json.RawMessage  `json:"normalizers"`
	Processors     []json.RawMessage  `json:"processors"`
	Decoders       []json.RawMessage  `json:"decoders"`
	Single         []templatePieceRaw `json:"single"`
	SpecialTokens  map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
	Cls []json.RawMessage `json:"cls"`
	Sep []json.RawMessage `json:"sep"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

type templatePieceRaw struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

func parse(tj []byte, tjPath string, cj []byte, cjPath string, gj []byte, gjPath string) (*Tokenizer, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("tokenizer: %s: %s", tjPath, fmt.Sprintf(format, args...))
	}
	if len(tj) > MaxFileBytes {
		return nil, fail("larger than %d bytes", MaxFileBytes)
	}
	var f fileJSON
	if err := json.Unmarshal(tj, &f); err != nil {
		return nil, fail("%v", err)
	}
	runePropsOnce.Do(buildRuneProps)
	t := &Tokenizer{cache: &pieceCache{seed: maphash.MakeSeed()}}
	if sentencePieceStyle(f.PreTokenizer) {
		t.spm = &sentencePiece{}
	}
	if err := t.buildModel(&f.Model, f.AddedTokens); err != nil {
		return nil, fail("%v", err)
	}
	var err error
	if t.spm != nil {
		// SentencePiece-style BPE: its own normalizer, pre-tokenizer and decoder (metaspace.go).
		if err = t.buildSentencePiece(&f); err != nil {
			return nil, fail("%v", err)
		}
	} else {
		if t.norm, err = parseNormalizer(f.Normalizer); err != nil {
			return nil, fail("normalizer: %v", err)
		}
		if t.pre, err = parsePreTokenizer(f.PreTokenizer); err != nil {
			return nil, fail("pre_tokenizer: %v", err)
		}
		if !slices.ContainsFunc(t.pre, func(p preStep) bool { return p.byteLevel }) {
			return nil, fail("pre_tokenizer: no ByteLevel step, so not a byte-level BPE")
		}
		if err = checkDecoder(f.Decoder); err != nil {
			return nil, fail("decoder: %v", err)
		}
	}
	t.texts, t.pieces = packTokenTexts(t.tokBytes), newStrTable(t.pieceID)
	t.tokBytes, t.pieceID = nil, nil
	for i, p := range t.pre {
		if p.split != nil || p.prefixSpace {
			t.preEnd = i + 1
		}
	}
	if err = t.parsePostProcessor(f.PostProcessor); err != nil {
		return nil, fail("post_processor: %v", err)
	}
	if err = t.parseConfig(cj, gj); err != nil {
		path := cjPath
		if errors.Is(err, errGeneration) {
			path = gjPath
		}
		return nil, fmt.Errorf("tokenizer: %s: %v", path, err)
	}
	t.computeWholeTokens()
	return t, nil
}

// maxVocab bounds the token ids a file may use, so that a corrupt or hostile file cannot make
// Load allocate more than a few hundred megabytes.
const maxVocab = 1 << idBits

func (t *Tokenizer) buildModel(m *modelJSON, added []addedTokenJSON) error {
	if m.Type != "BPE" && !(m.Type == "" && m.Vocab != nil && m.Merges != nil) {
		return fmt.Errorf("model.type %q: only BPE is supported", m.Type)
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return fmt.Errorf("model.dropout %v: BPE dropout is not supported", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return fmt.Errorf("model.continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return fmt.Errorf("model.end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	if m.ByteFallback && t.spm == nil {
		return errors.New("model.byte_fallback is not supported with a ByteLevel pre-tokenizer (only with SentencePiece-style BPE: Metaspace or none)")
	}
	if len(m.Vocab) == 0 {
		return errors.New("model.vocab is empty")
	}
	t.ignoreMerges = m.IgnoreMerges

	// Ids are dense in every real file; bound them so a hostile file cannot make us allocate
	// an id table far larger than the file.
	maxID := -1
	for tok, id := range m.Vocab {
		if id < 0 || id >= maxVocab {
			return fmt.Errorf("model.vocab[%q]: id %d out of range [0, %d)", tok, id, maxVocab)
		}
		maxID = max(maxID, id)
	}
	for i, a := range added {
		if a.ID < 0 || a.ID >= maxVocab {
			return fmt.Errorf("added_tokens[%d]: id %d out of range [0, %d)", i, a.ID, maxVocab)
		}
		if a.Content == "" {
			return fmt.Errorf("added_tokens[%d]: empty content", i)
		}
		maxID = max(maxID, a.ID)
	}
	if n := len(m.Vocab) + len(added); maxID >= 2*n+1024 {
		return fmt.Errorf("ids are sparse: the largest is %d for %d tokens", maxID, n)
	}

	// Each vocabulary token as the bytes it stands for. A token whose characters are not all in
	// the byte-level alphabet cannot come out of the byte-level BPE; it decodes to its own UTF-8
	// (as Hugging Face's ByteLevel decoder does).
	//
	// The decoded tokens are slices of one string: one object for the garbage collector to mark
	// rather than one per token (150,000 for Qwen), which each of its cycles would visit, a cost
	// every request's allocations share. (A token's decoded bytes are never longer than the
	// token.)
	size := 0
	for tok := range m.Vocab {
		size += len(tok)
	}
	arena := make([]byte, 0, size)
	type decoded struct {
		id, start, end int
		tok            string // when it is not byte-level
	}
	all := make([]decoded, 0, len(m.Vocab))
	for tok, id := range m.Vocab {
		start := len(arena)
		var ok bool
		if arena, ok = appendByteLevelDecode(arena, tok); !ok {
			arena = arena[:start]
			all = append(all, decoded{id: id, tok: tok})
			continue
		}
		all = append(all, decoded{id: id, start: start, end: len(arena)})
	}
	bytesOf := string(arena)
	t.tokBytes = make([]string, maxID+1)
	t.known = make([]bool, maxID+1)
	t.pieceID = make(map[string]int32, len(m.Vocab))
	for _, d := range all {
		b := d.tok
		if b == "" {
			b = bytesOf[d.start:d.end]
			t.pieceID[b] = int32(d.id)
		}
		t.tokBytes[d.id] = b
		t.known[d.id] = true
	}
	for i := range t.byteID {
		t.byteID[i] = -1
		if id, ok := m.Vocab[byteLevelAlphabet[i]]; ok {
			t.byteID[i] = int32(id)
		}
	}
	t.unkID = -1
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return fmt.Errorf("model.unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		t.unkID = int32(id)
	}

	if err := t.parseMerges(m.Merges, m.Vocab); err != nil {
		return err
	}

	// Added tokens: matched in the input before pre-tokenization (when Options.ParseSpecial).
	t.special = make([]bool, maxID+1)
	t.addedID = make(map[string]int32, len(added))
	for _, a := range added {
		// An added token's bytes, when decoding: as Hugging Face's ByteLevel decoder maps them
		// (through the byte-level alphabet when every character is in it, else its UTF-8).
		b, ok := byteLevelDecode(a.Content)
		if !ok {
			b = a.Content
		}
		t.tokBytes[a.ID] = b
		t.known[a.ID] = true
		t.special[a.ID] = a.Special
		t.addedID[a.Content] = int32(a.ID)
		t.added = append(t.added, addedToken{
			content: a.Content, id: int32(a.ID), special: a.Special,
			lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord,
		})
	}
	t.buildAddedMatcher()
	return nil
}

// parseMerges reads model.merges in either format: "a b" strings (tokenizers before 0.20) or
// ["a", "b"] pairs.
func (t *Tokenizer) parseMerges(raw json.RawMessage, vocab map[string]int) error {
	raw = bytes.TrimSpace(raw)
	var pairs [][2]string
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New("model.merges is missing")
	}
	rest := bytes.TrimSpace(bytes.TrimPrefix(raw, []byte("[")))
	if len(rest) > 0 && rest[0] == '"' {
		var ss []string
		if err := json.Unmarshal(raw, &ss); err != nil {
			return fmt.Errorf("model.merges: %v", err)
		}
		pairs = make([][2]string, len(ss))
		for i, s := range ss {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return fmt.Errorf("model.merges[%d] %q: not two tokens separated by a space", i, s)
			}
			pairs[i] = [2]string{a, b}
		}
	} else {
		var ps [][]string
		if err := json.Unmarshal(raw, &ps); err != nil {
			return fmt.Errorf("model.merges: %v", err)
		}
		pairs = make([][2]string, len(ps))
		for i, p := range ps {
			if len(p) != 2 {
				return fmt.Errorf("model.merges[%d]: %d strings, want 2", i, len(p))
			}
			pairs[i] = [2]string{p[0], p[1]}
		}
	}
	if len(pairs) >= 1<<rankBits {
		return fmt.Errorf("model.merges: %d merges, at most %d are supported", len(pairs), 1<<rankBits-1)
	}
	t.merges = newPairTable(len(pairs))
	for rank, p := range pairs {
		a, okA := vocab[p[0]]
		b, okB := vocab[p[1]]
		ab, okAB := vocab[p[0]+p[1]]
		switch {
		case !okA:
			return fmt.Errorf("model.merges[%d]: token %q is not in the vocabulary", rank, p[0])
		case !okB:
			return fmt.Errorf("model.merges[%d]: token %q is not in the vocabulary", rank, p[1])
		case !okAB:
			return fmt.Errorf("model.merges[%d]: merged token %q is not in the vocabulary", rank, p[0]+p[1])
		}
		// A later duplicate wins, as in Hugging Face's tokenizers and transformers.js.
		t.merges.put(int32(a), int32(b), rank, int32(ab))
	}
	return nil
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return normNone, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, err
	}
	switch n.Type {
	case "NFC":
		return normNFC, nil
	case "NFKC":
		return normNFKC, nil
	case "NFD":
		return normNFD, nil
	case "NFKD":
		return normNFKD, nil
	case "Sequence":
		// A sequence of one Unicode normalization (or none) is the only kind supported.
		out := normNone
		for _, r := range n.Normalizers {
			x, err := parseNormalizer(r)
			if err != nil {
				return 0, err
			}
			if x != normNone && out != normNone {
				return 0, errors.New("a sequence of several normalizers is not supported")
			}
			if x != normNone {
				out = x
			}
		}
		return out, nil
	}
	return 0, fmt.Errorf("type %q is not supported (NFC, NFKC, NFD, NFKD are)", n.Type)
}

func parsePreTokenizer(raw json.RawMessage) ([]preStep, error) {
	if isNull(raw) {
		return nil, nil
	}
	var p componentJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	switch p.Type {
	case "Sequence":
		var steps []preStep
		for _, r := range p.PreTokenizers {
			s, err := parsePreTokenizer(r)
			if err != nil {
				return nil, err
			}
			steps = append(steps, s...)
		}
		return steps, nil
	case "Split":
		if p.Pattern == nil || p.Pattern.Regex == nil {
			return nil, errors.New("Split: only a Regex pattern is supported")
		}
		// The known patterns match every character, so the matches are the pieces whether they
		// are kept with what lies between (Isolated) or alone (Removed, inverted: the
		// gpt-3.5-turbo conversion's way).
		if !(p.Behavior == "Isolated" && !p.Invert || p.Behavior == "Removed" && p.Invert) {
			return nil, fmt.Errorf("Split: behavior %q (invert %v): only Isolated, or Removed inverted, is supported", p.Behavior, p.Invert)
		}
		sc, ok := knownPatterns[*p.Pattern.Regex]
		if !ok {
			return nil, fmt.Errorf("Split: pattern %q is not one this package knows (GPT-2, Llama 3, Qwen 2)", *p.Pattern.Regex)
		}
		return []preStep{{split: sc}}, nil
	case "ByteLevel":
		step := preStep{byteLevel: true, prefixSpace: p.AddPrefixSpace}
		if p.UseRegex == nil || *p.UseRegex {
			step.split = scanGPT2
		}
		return []preStep{step}, nil
	}
	return nil, fmt.Errorf("type %q is not supported (Sequence, Split, ByteLevel are)", p.Type)
}

func (t *Tokenizer) parsePostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var p componentJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	switch p.Type {
	case "ByteLevel":
		return nil // offsets only
	case "Sequence":
		for _, r := range p.Processors {
			if err := t.parsePostProcessor(r); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		seen := false
		for _, piece := range p.Single {
			switch {
			case piece.SpecialToken != nil:
				st, ok := p.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("TemplateProcessing: special token %q is not in special_tokens", piece.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if id < 0 || id >= len(t.known) || !t.known[id] {
						return fmt.Errorf("TemplateProcessing: special token %q: id %d is not in the vocabulary", piece.SpecialToken.ID, id)
					}
				}
				if seen {
					t.suffix = append(t.suffix, st.IDs...)
				} else {
					t.prefix = append(t.prefix, st.IDs...)
				}
			case piece.Sequence != nil:
				if seen {
					return errors.New("TemplateProcessing: the single template has two sequences")
				}
				seen = true
			}
		}
		if !seen {
			return errors.New("TemplateProcessing: the single template has no sequence")
		}
		return nil
	case "RobertaProcessing", "BertProcessing":
		id := func(raw []json.RawMessage, name string) (int, error) {
			var v int
			if len(raw) != 2 || json.Unmarshal(raw[1], &v) != nil || v < 0 || v >= len(t.known) || !t.known[v] {
				return 0, fmt.Errorf("%s: %s is not a [token, id] pair with an id in the vocabulary", p.Type, name)
			}
			return v, nil
		}
		cls, err := id(p.Cls, "cls")
		if err != nil {
			return err
		}
		sep, err := id(p.Sep, "sep")
		if err != nil {
			return err
		}
		t.prefix = append(t.prefix, cls)
		t.suffix = append(t.suffix, sep)
		return nil
	}
	return fmt.Errorf("type %q is not supported (ByteLevel, TemplateProcessing, Sequence, RobertaProcessing, BertProcessing are)", p.Type)
}

// checkDecoder accepts the decoders this package implements: ByteLevel, alone or in a Sequence.
func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("none: a ByteLevel decoder is required")
	}
	var p componentJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	switch p.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		if len(p.Decoders) == 0 {
			return errors.New("an empty Sequence")
		}
		for _, r := range p.Decoders {
			if err := checkDecoder(r); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("type %q is not supported (ByteLevel is)", p.Type)
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// ---- tokenizer_config.json and generation_config.json ------------------------------------------

var errGeneration = errors.New("generation_config.json")

func (t *Tokenizer) parseConfig(cj, gj []byte) error {
	c := &t.cfg
	c.BOSTokenID, c.EOSTokenID, c.PadTokenID = -1, -1, -1
	if cj != nil {
		var raw struct {
			BOS            json.RawMessage `json:"bos_token"`
			EOS            json.RawMessage `json:"eos_token"`
			Pad            json.RawMessage `json:"pad_token"`
			Unk            json.RawMessage `json:"unk_token"`
			AddBOS         *bool           `json:"add_bos_token"`
			AddEOS         *bool           `json:"add_eos_token"`
			MaxLen         *float64        `json:"model_max_length"`
			ChatTemplate   json.RawMessage `json:"chat_template"`
			TokenizerClass string          `json:"tokenizer_class"`
			CleanUp        *bool           `json:"clean_up_tokenization_spaces"`
		}
		if err := json.Unmarshal(cj, &raw); err != nil {
			return err
		}
		var err error
		for _, f := range []struct {
			raw  json.RawMessage
			text *string
			name string
		}{{raw.BOS, &c.BOSToken, "bos_token"}, {raw.EOS, &c.EOSToken, "eos_token"}, {raw.Pad, &c.PadToken, "pad_token"}, {raw.Unk, &c.UnkToken, "unk_token"}} {
			if *f.text, err = tokenText(f.raw); err != nil {
				return fmt.Errorf("%s: %v", f.name, err)
			}
		}
		c.AddBOSToken, c.AddEOSToken = raw.AddBOS, raw.AddEOS
		if raw.MaxLen != nil {
			switch v := *raw.MaxLen; {
			case v < 0 || math.IsNaN(v):
				return fmt.Errorf("model_max_length %v is negative", v)
			case v >= math.MaxInt:
				c.ModelMaxLength = math.MaxInt
			default:
				c.ModelMaxLength = int(v)
			}
		}
		if c.ChatTemplate, c.ChatTemplates, err = chatTemplates(raw.ChatTemplate); err != nil {
			return fmt.Errorf("chat_template: %v", err)
		}
		c.TokenizerClass = raw.TokenizerClass
		c.CleanUpTokenizationSpaces = raw.CleanUp != nil && *raw.CleanUp
	}
	lookup := func(s string) int {
		if id, ok := t.TokenID(s); ok && s != "" {
			return id
		}
		return -1
	}
	c.BOSTokenID, c.EOSTokenID, c.PadTokenID = lookup(c.BOSToken), lookup(c.EOSToken), lookup(c.PadToken)
	if gj != nil {
		var raw struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(gj, &raw); err != nil {
			return fmt.Errorf("%w: %v", errGeneration, err)
		}
		if !isNull(raw.EOS) {
			var one int
			if json.Unmarshal(raw.EOS, &one) == nil {
				c.EOSTokenIDs = []int{one}
			} else if err := json.Unmarshal(raw.EOS, &c.EOSTokenIDs); err != nil {
				return fmt.Errorf("%w: eos_token_id: not a number or a list of numbers", errGeneration)
			}
		}
	}
	if c.EOSTokenIDs == nil && c.EOSTokenID >= 0 {
		c.EOSTokenIDs = []int{c.EOSTokenID}
	}
	return nil
}

// tokenText reads a token that is a string, null, or an AddedToken object {"content": ...}.
func tokenText(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", errors.New("neither a string nor an object with content")
	}
	return o.Content, nil
}

// chatTemplates reads chat_template: a string, or a list of {name, template}.
func chatTemplates(raw json.RawMessage) (string, map[string]string, error) {
	if isNull(raw) {
		return "", nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", nil, errors.New("neither a string nor a list of {name, template}")
	}
	m := make(map[string]string, len(list))
	for _, e := range list {
		m[e.Name] = e.Template
	}
	return m["default"], m, nil
}

// ---- the byte-level alphabet ------------------------------------------------------------------

// byteLevelAlphabet[b] is the character GPT-2's byte-level BPE writes for byte b: printable
// Latin-1 stands for itself, the other bytes for U+0100 onwards in order.
var byteLevelAlphabet [256]string

// byteOfRune maps a byte-level character back to its byte; -1 for others.
var byteOfRune [324]int16

func init() {
	for i := range byteOfRune {
		byteOfRune[i] = -1
	}
	n := 0
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = rune(256 + n)
			n++
		}
		byteLevelAlphabet[b] = string(r)
		byteOfRune[r] = int16(b)
	}
}

// byteLevelDecode maps a byte-level string back to the bytes it stands for; ok is false when a
// character is outside the alphabet.
func byteLevelDecode(s string) (string, bool) {
	buf, ok := appendByteLevelDecode(make([]byte, 0, len(s)), s)
	if !ok {
		return "", false
	}
	return string(buf), true
}

// appendByteLevelDecode appends byteLevelDecode(s) to buf; false (and buf partly appended to)
// when s is not byte-level.
func appendByteLevelDecode(buf []byte, s string) ([]byte, bool) {
	for _, r := range s {
		if r < 0 || int(r) >= len(byteOfRune) || byteOfRune[r] < 0 {
			return buf, false
		}
		buf = append(buf, byte(byteOfRune[r]))
	}
	return buf, true
}

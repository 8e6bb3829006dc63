#!/usr/bin/env bash
# capture.sh regenerates ../../golden_data_test.go: it copies the gateway's former JSON string
# writers and unescapers, verbatim, out of the commit before they moved onto jsonwire (85bd15b,
# their paths then under adapters/), builds them with main.go.txt in a scratch module, runs them
# over a fixed set of inputs, and prints the tables. Run it from this folder:
#   bash capture.sh > ../../golden_data_test.go
set -euo pipefail
rev=${1:-85bd15b}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/jsonscan"
git -C "$repo" show "$rev:internal/jsonscan/jsonscan.go" >"$work/jsonscan/jsonscan.go"
printf 'module capture\n\ngo 1.26.0\n' >"$work/go.mod"
cp "$here/main.go.txt" "$work/main.go"

# ext FILE PREFIX: the function or method of FILE (at rev) whose declaration starts "func PREFIX".
# awk reads to the end (no exit) so that git is not cut off mid-write under pipefail.
ext() { git -C "$repo" show "$rev:$1" | awk -v f="$2" '!done && index($0, "func "f)==1 {p=1} p {print} p && /^}/ {p=0; done=1}'; }

{
	printf 'package main\n\nimport (\n\t"strings"\n\t"unicode/utf16"\n\t"unicode/utf8"\n\n\t"capture/jsonscan"\n)\n\n'
	printf 'var _ = utf16.IsSurrogate\n\nconst hexDigitsA = "0123456789abcdef"\n\nconst hexDigits = "0123456789abcdef"\n\n'
	ext adapters/anthropic/jsonw.go 'appendString(' | sed 's/^func appendString/func anthropicString/; s/appendStringInner/anthropicInner/'
	ext adapters/anthropic/jsonw.go 'appendStringInner(' | sed 's/^func appendStringInner/func anthropicInner/; s/hexDigits/hexDigitsA/g'
	ext adapters/tensor/json.go 'AppendJSONString[' | sed 's/^func AppendJSONString/func tensorString/'
	ext adapters/llm/granite/granitestage/stream.go 'appendJSONString(' | sed 's/^func appendJSONString/func graniteStageString/'
	ext adapters/respcache/key.go 'appendString(' | sed 's/^func appendString/func respcacheString/'
	for f in 'pyString(' 'writeRunePy(' 'writeU('; do ext adapters/llm/granite/pyjson.go "$f"; done
} >"$work/writers.go"

{
	printf 'package main\n\nimport (\n\t"bytes"\n\t"fmt"\n\t"strconv"\n\t"strings"\n\t"unicode/utf16"\n\t"unicode/utf8"\n\n\t"capture/jsonscan"\n)\n\n'
	printf 'var interned = map[string]string{}\n\n'
	ext adapters/anthropic/decode.go 'unquote(' | sed 's/^func unquote/func anthropicUnquote/; s/hex4(/hex4A(/g'
	ext adapters/anthropic/decode.go 'hex4(' | sed 's/^func hex4/func hex4A/'
	ext adapters/llm/chattemplate/input.go 'unquote(' | sed 's/^func unquote/func chattemplateUnquote/; s/hex4(/hex4C(/g'
	ext adapters/llm/chattemplate/input.go 'hex4(' | sed 's/^func hex4/func hex4C/'
	printf 'type jscan struct {\n\tb []byte\n\ti int\n}\n\n'
	ext adapters/llm/granite/granitestage/answer.go '(s *jscan) strDecode('
	ext adapters/llm/granite/granitestage/answer.go 'u4('
	printf 'type jsonDecoder struct {\n\tdata, dst []byte\n\tcount int\n}\n\ntype JSONError struct {\n\tOffset int\n\tMsg string\n}\n\n'
	printf 'func (e *JSONError) Error() string { return e.Msg }\n\n'
	ext adapters/tensor/json.go '(d *jsonDecoder) fail('
	ext adapters/tensor/json.go '(d *jsonDecoder) appendString(' | sed 's/hex4(data, /hex4T(data, /g'
	ext adapters/tensor/json.go 'hex4(' | sed 's/^func hex4/func hex4T/'
	printf 'var errSyntax = fmt.Errorf("respcache: malformed JSON")\n\ntype canonParser struct {\n\tsrc []byte\n\ti int\n}\n\n'
	ext adapters/respcache/canon.go '(p *canonParser) str('
	ext adapters/respcache/canon.go '(p *canonParser) hex4('
	printf 'var errBadJSON = fmt.Errorf("malformed JSON")\n\ntype pyScanner struct {\n\ts []byte\n\ti int\n\tb *strings.Builder\n}\n\n'
	ext adapters/llm/granite/pyjson.go '(sc *pyScanner) str('
	ext adapters/llm/granite/pyjson.go '(sc *pyScanner) hex4('
} >"$work/unescapers.go"

cd "$work"
gofmt -w writers.go unescapers.go
go run .

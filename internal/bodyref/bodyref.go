// Package bodyref holds what the request-body view (lib/openaiwire.Body, and
// pipeline.Request's Fields and EditBody built on it) is tested against: the code
// pipeline.Request ran before the view existed, kept as it was, and the request bodies of the
// tree's corpora to run both on. Tests import it; nothing else should.
package bodyref

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Fields is the old pipeline.Request.Fields: the body's top-level members as encoding/json
// decodes them into a map (names unescaped, values copied, the last duplicate wins).
func Fields(body []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("decoding the request body: %w", err)
	}
	return m, nil
}

// EditBody is the old pipeline.Request.EditBody on f, a body's Fields: set's members set, the
// members named in drop removed (drop wins over set), every other value as it was; the members
// sorted by name, names as json.Marshal writes them, no white space between members.
func EditBody(f, set map[string]json.RawMessage, drop ...string) ([]byte, error) {
	keys := make([]string, 0, len(f)+len(set))
	for k := range f {
		if _, ok := set[k]; !ok && !slices.Contains(drop, k) {
			keys = append(keys, k)
		}
	}
	for k := range set {
		if !slices.Contains(drop, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := []byte{'{'}
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		v, ok := set[k]
		if !ok {
			v = f[k]
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, fmt.Errorf("encoding the request body: %w", err)
		}
		out = append(append(append(out, kb...), ':'), v...)
	}
	return append(out, '}'), nil
}

// corpora are the folders, from the module's root, whose files are request bodies or Go fuzz
// corpus entries holding them.
var corpora = []string{
	"internal/jsonwire/testdata/bench",
	"internal/jsonwire/testdata/fuzz/FuzzWire",
	"lib/chattemplate/testdata/fuzz/FuzzDecodeRequest",
}

// Seeds are request bodies to test on: a few edge cases, then every body in the corpora; root
// is the module's root, relative to the test's folder. Of a fuzz corpus entry, each []byte
// argument is a body.
func Seeds(root string) ([][]byte, error) {
	seeds := [][]byte{
		[]byte(`{}`), []byte(` { } `), []byte(`{"":1}`), []byte(`{"a":null,"a":{"b":[1,2]}}`),
		[]byte(`{"model":"m","stream":true,"max_tokens":9,"max_completion_tokens":3}`),
		[]byte(`{"model":"a","model":"b","mod\u0065l":"c","stream":null}`),
		[]byte("{\"k\\\"\":\"\u2028\",\"\\u00e9\":[ 1 , 2 ] ,\"z\": \"x\", \"model\" : \"m\" }"),
		[]byte("{\"model\":\"m\",\"\xff\":1,\"\\ud800\":2,\"<\":3}"),
		[]byte(`null`), []byte(`[1]`), []byte(`{"a":1`), []byte(`{"a":1}}`),
	}
	for _, dir := range corpora {
		files, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			return nil, fmt.Errorf("reading corpus %s: %w", dir, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(root, dir, f.Name()))
			if err != nil {
				return nil, fmt.Errorf("reading corpus %s: %w", dir, err)
			}
			if !bytes.HasPrefix(b, []byte("go test fuzz v1\n")) {
				seeds = append(seeds, b)
				continue
			}
			for _, line := range strings.Split(string(b), "\n")[1:] {
				if s, ok := strings.CutPrefix(line, "[]byte("); ok {
					if v, err := strconv.Unquote(strings.TrimSuffix(s, ")")); err == nil {
						seeds = append(seeds, []byte(v))
					}
				}
			}
		}
	}
	return seeds, nil
}

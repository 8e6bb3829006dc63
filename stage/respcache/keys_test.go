package respcache

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/bodyref"
	"github.com/infergate/infergate/lib/openaiwire"
)

var updateKeys = flag.Bool("update-keys", false, "rewrite testdata/keys.golden with this code's lookups")

// keyBodies are the request bodies TestKeysCorpus derives lookups for: the tree's request corpora
// (internal/bodyref) and bodies that probe what derive reads: repeated and escaped member names,
// the members it skips, the bypasses, the text a semantic key takes out.
func keyBodies(t *testing.T) [][]byte {
	seeds, err := bodyref.Seeds(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`{"model":"m","temperature":0,"max_tokens":10,"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"What is the capital of France?"}],"user":"bob"}`,
		`{"model":"m","temperature":0,"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}`,
		`{"model":"m","temperature":0,"mess\u0061ges":[{"role":"user","content":"a"}],"Messages":[{"role":"user","content":"b"}]}`,
		`{"model":"m","temperature":0,"prompt":"q","messages":[{"role":"assistant","content":"x"},{"role":"user","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]},{"role":"tool"}]}`,
		`{"model":"m","temperature":0,"prompt":["a"],"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
		`{"model":"m","temperature":0,"messages":[{"role":"user","content":"a","Content":"b","role":"user"}],"prompt":"p","prompt":"q"}`,
		`{"model":"m","temperature":0,"":1,"stream":true,"stream_options":{"include_usage":true},"user":"u","kv_transfer_params":{},"n":1,"seed":1,"metadata":{"a":1}}`,
		`{"model":"m","temperature":0,"model":"n","n":1.0,"n":null,"temperature":0e5}`,
		`{"model":"m","temperature":null}`, `{"model":"m"}`, `{"model":"m","temperature":-0.0,"n":2}`,
		`{"model":"m","temperature":0,"logprobs":true}`, `{"model":"m","temperature":0,"logprobs":false,"top_logprobs":0}`,
		`{"model":"m","temperature":0,"logprobs":5}`, `{"model":"m","temperature":0,"top_logprobs":null,"logprobs":0}`,
		"{\"model\":\"m\",\"temperature\":0,\"\xff\":1,\"\\ufffd\":2,\"\\ud800\":3,\"messages\":[{\"role\":\"user\",\"content\":\"\\ud83d\\ude00\xff\"}]}",
		`{"model":"m","temperature":0,"x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `,"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","temperature":0,"messages":[{"role":"user","content":"q","x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}]}`,
		`{"model":"m","temperature":0,"tools":[{"type":"function","function":{"name":"f","parameters":{"b":1e0,"a":[1.0]}}}],"messages":[{"role":"user","content":"q"}],"seed":12345678901234567890}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// TestKeysCorpus holds the lookups derive makes (exact and semantic keys, the text, the bypass)
// on the corpus bodies to those testdata/keys.golden recorded from the code before it read the
// request's view: it read encoding/json's map of the members. A key that changes is a cache
// entry every running deployment loses. A body new to the corpora is logged, not checked: record
// it with -update-keys on a commit whose keys are known good.
func TestKeysCorpus(t *testing.T) {
	keyers := []*keyer{
		{model: "m", semantic: true, sampling: true, skip: skipped},
		{model: "m", sampling: true, skip: append(append([]string(nil), skipped...), "seed", "metadata")},
		{model: "m", semantic: true, skip: skipped},
	}
	var lines []string
	for _, body := range keyBodies(t) {
		if string(body) == "null" {
			continue // encoding/json reads it as a map without members, but no request is null
		}
		id := sha256.Sum256(body)
		for _, path := range []string{pathChat, pathCompletions} {
			for i, k := range keyers {
				l, ok := deriveBody(k, path, body)
				if !ok {
					l.bypass = "unreadable"
				}
				text := sha256.Sum256([]byte(l.text))
				lines = append(lines, fmt.Sprintf("%x %s %d %s %s %x %s", id[:8], path, i, l.key, l.partition, text[:8], l.bypass))
			}
		}
	}
	golden := filepath.Join("testdata", "keys.golden")
	if *updateKeys {
		if err := os.WriteFile(golden, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // the line by its body, path and keyer
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		want[strings.Join(f[:3], " ")] = sc.Text()
	}
	checked := 0
	for _, line := range lines {
		f := strings.Fields(line)
		w, ok := want[strings.Join(f[:3], " ")]
		switch {
		case !ok:
			t.Logf("not in %s: %s", golden, line)
		case w != line:
			t.Errorf("lookup changed:\n got %s\nwant %s", line, w)
		default:
			checked++
		}
	}
	if checked < len(want)*9/10 {
		t.Errorf("%d of %s's %d lookups checked: its bodies are gone from the corpora", checked, golden, len(want))
	}
}

// deriveBody is the lookup the stage derives from body, for owner "o"; false when the body
// cannot be read.
func deriveBody(k *keyer, path string, body []byte) (lookup, bool) {
	w, err := openaiwire.Parse(body)
	if err != nil {
		return lookup{}, false
	}
	return k.derive(path, "o", w), true
}

package batch

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkQuickLine: finding a batch line's custom_id and body without decoding it, as every
// read of an input file does for each line: a short chat line and one with a 4 KB message.
func BenchmarkQuickLine(b *testing.B) {
	short := `{"custom_id":"request-1","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"Say hello."}],"max_tokens":16}}`
	long := `{"custom_id":"request-2","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"` +
		strings.Repeat(`Summarise this: \"quoted\" text, tabs\tand lines\n. `, 80) + `"}],"temperature":0.2}}`
	for _, c := range []struct{ name, line string }{{"short", short}, {"long", long}} {
		raw := []byte(c.line)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, ok := quickLine(raw); !ok {
					b.Fatal("not quick")
				}
			}
		})
	}
}

// BenchmarkReadLines: a later read of a validated input file (a give-up's, a redispatch's), 1,000
// short chat lines and 100 long ones: each line checked as JSON and its custom_id and body found.
func BenchmarkReadLines(b *testing.B) {
	var file bytes.Buffer
	for i := range 1100 {
		content := "Say hello."
		if i%11 == 10 {
			content = strings.Repeat(`Summarise this: \"quoted\" text, tabs\tand lines\n. `, 80)
		}
		fmt.Fprintf(&file, `{"custom_id":"request-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"%s"}],"max_tokens":16}}`+"\n", i, content)
	}
	in, errs, err := scanInput(bytes.NewReader(file.Bytes()), "/v1/chat/completions", 10000, 1<<20, nil)
	if err != nil || errs != nil {
		b.Fatal(err, errs)
	}
	b.SetBytes(int64(file.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if err := readLines(bytes.NewReader(file.Bytes()), in, 1<<20, func(Line) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

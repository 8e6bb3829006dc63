package openaiwire

import (
	"fmt"
	"strings"
)

func ExampleResponsesStream() {
	meta := ResponsesMeta{ID: "resp_1", Model: "m", Store: true}
	s := NewResponsesStream(meta)
	var out []byte
	for _, data := range []string{
		`{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`,
		`[DONE]`,
	} {
		out, _ = s.Chunk(out, []byte(data))
	}
	out, _ = s.Finish(out, nil)
	for _, line := range strings.Split(string(out), "\n") {
		if typ, ok := strings.CutPrefix(line, "event: "); ok {
			fmt.Println(typ)
		}
	}
	// Output:
	// response.created
	// response.in_progress
	// response.output_item.added
	// response.content_part.added
	// response.output_text.delta
	// response.output_text.done
	// response.content_part.done
	// response.output_item.done
	// response.completed
}

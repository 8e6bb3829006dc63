package tokenizer_test

import (
	"fmt"

	"github.com/infergate/infergate/lib/tokenizer"
)

// Load reads a model's directory as Hugging Face ships it (here Qwen3's tokenizer.json and
// tokenizer_config.json, gzipped). Text from a user is encoded without ParseSpecial, so that
// "<|im_end|>" in it stays plain text; a chat template's own output is encoded with it.
func Example() {
	tok, err := tokenizer.Load("testdata/qwen3")
	if err != nil {
		panic(err)
	}
	text := "Hello, world!<|im_end|>"
	user := tok.Encode(text, tokenizer.Options{})
	template := tok.Encode(text, tokenizer.Options{ParseSpecial: true})
	fmt.Println(user)
	fmt.Println(template, tok.TokenString(template[len(template)-1]))
	fmt.Printf("%q %q\n", tok.Decode(user, true), tok.Decode(template, true)) // true: skip special tokens
	// Output:
	// [9707 11 1879 86932 91 318 6213 91 29]
	// [9707 11 1879 0 151645] <|im_end|>
	// "Hello, world!<|im_end|>" "Hello, world!"
}

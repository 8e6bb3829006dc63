// Package tokenizer is exact byte-level BPE tokenization of Hugging Face tokenizer.json files.
package tokenizer

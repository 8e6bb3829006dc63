#!/usr/bin/env bash
# run.sh OLLA_SRC [SCRIPT...]: Olla's own test scripts (OLLA_SRC/test/scripts, from a checkout of
# github.com/thushan/olla) against infergate in front of a simulated vLLM server, with Olla's
# headers on (compat.olla_headers). Prints each script's exit status and keeps its output under
# $OUT (default /tmp/ollacompat). Needs python3 with requests. The scripts are not in this
# repository (another project's code): pass a checkout.
set -uo pipefail
src=${1:?usage: run.sh OLLA_SRC [SCRIPT...]}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/ollacompat}
mkdir -p "$out"
bin=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$bin"' EXIT
(cd "$root" && go build -o "$bin/infergate" ./runtime && go build -o "$bin/fakevllm" ./tools/ollacompat/fakevllm) || exit 1
model=${MODEL:-phi4:latest}  # the streaming scripts pick phi4:latest without asking
"$bin/fakevllm" -listen 127.0.0.1:18001 -model "$model" >"$out/fakevllm.log" 2>&1 &
cat >"$bin/config.yaml" <<YAML
upstreams:
  - {name: vllm-1, url: "http://127.0.0.1:18001", type: vllm, check_interval: 1s}
compat: {olla_headers: true}
YAML
"$bin/infergate" -config "$bin/config.yaml" -listen 127.0.0.1:18000 >"$out/infergate.log" 2>&1 &
base=http://127.0.0.1:18000
for _ in $(seq 100); do
  curl -fs "$base/olla/models" 2>/dev/null | grep -q "\"$model\"" && break
  sleep 0.1
done
scripts=("$@")
if [ ${#scripts[@]} -eq 0 ]; then
  scripts=(integration/test-integration.py sticky/test-sticky-sessions.py passthrough/test-passthrough.py
    streaming/test-streaming-detection.py streaming/test-streaming-latency.py streaming/test-streaming-responses.py
    logic/test-model-routing-provider.py logic/test-provider-models.sh logic/test-provider-routing.sh)
fi
for s in "${scripts[@]}"; do
  name=$(basename "$s")
  case $s in
    *.py) (cd "$src/test/scripts/$(dirname "$s")" && timeout 300 python3 "$name" --url "$base") ;;
    *.sh) (cd "$src/test/scripts/$(dirname "$s")" && TARGET_URL=$base timeout 300 bash "$name") ;;
  esac >"$out/$name.log" 2>&1 </dev/null
  echo "$? $s"
done

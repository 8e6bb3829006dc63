#!/usr/bin/env bash
# Installs the official Node SDKs that TestResponsesNode runs against the gateway (openai,
# @openai/agents and its peer zod, pinned in package.json and package-lock.json) into
# node_modules here (git-ignored). .ci/run calls this script, then sets INFERGATE_REQUIRE_NODE=1;
# elsewhere the test skips without node or node_modules. Needs Node.js 20 or later and npm.
set -euo pipefail
cd "$(dirname "$0")"
install() { npm ci --no-audit --no-fund --prefer-offline; }
if ! install; then
  echo "install.sh: npm ci failed; trying once more" >&2
  sleep 2
  install
fi
node -e 'for (const p of ["openai", "@openai/agents", "zod"]) console.log(p, JSON.parse(require("fs").readFileSync(`node_modules/${p}/package.json`)).version)'

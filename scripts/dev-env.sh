# shellcheck shell=bash
# Sourced by the other scripts: a virtualenv in .venv with imagebuild and its dev tools.
# Works on a fresh Debian machine with only Python (installs python3-venv when venv is missing).
if [ ! -x .venv/bin/python ]; then
    if ! python3 -m venv .venv 2>/dev/null; then
        rm -rf .venv
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        python3 -m venv .venv
    fi
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
export PATH="$PWD/.venv/bin:$PATH"

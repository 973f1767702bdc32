"""A stand-in for enroot, which Debian does not package (nor pyxis): its configuration, and nothing else.

What a pyxis job reads of enroot on a node is where ``enroot create`` will unpack the squashfs: its
``ENROOT_DATA_PATH``. enroot's own script reads its configuration in one block between two marker
lines (``# ---- BEGIN CONFIG ----``, ``# ----- END CONFIG -----``), and the job runs that block. The
stand-in has that block, written here after enroot's documented behaviour and its script as read
(NVIDIA/enroot, enroot.in), not copied: ``enroot.conf`` in its sysconfdir, ``KEY VALUE`` lines (or
``KEY=VALUE``) of which only enroot's names count, each value expanded by the shell (``$(id -u)``,
``${HOME}``), a variable already in the environment winning over the file; a file bash cannot parse
stops it with "Invalid configuration file" and exit 1; the XDG defaults; a setting of "no"/"false"
unset; then the directories made, umask 077. Every enroot command fails, saying it is a stand-in.
"""

from __future__ import annotations

import shlex
from pathlib import Path

BEGIN, END = "# ---- BEGIN CONFIG ----", "# ----- END CONFIG -----"

_SCRIPT = """\
#! /usr/bin/env bash
# The sample world's stand-in for enroot (sampleworld/enroot_standin.py): its configuration block only.
set -euo pipefail
shopt -s lastpipe

@BEGIN@

standin::setting() {  # NAME VALUE [force]: the environment's value wins unless forced
    if [[ -n ${3-} || -z ${!1:-} ]]; then export "$1=$2"; fi
}

standin::read() {  # FILE: its enroot settings, each value expanded by the shell
    local file=$1 key value
    if [[ -s $file ]] && ! "$BASH" -n "$file" >/dev/null 2>&1; then
        printf 'Invalid configuration file: %s\\n' "$file"
        exit 1
    fi
    [[ -e $file ]] || return 0
    while IFS=$' \\t=' read -r key value; do
        if [[ $key =~ ^ENROOT_[[:upper:]_]+$ ]]; then
            standin::setting "$key" "$(eval "echo $value")"
        fi
    done <"$file"
}

standin::read @SYSCONF@/enroot.conf

standin::setting XDG_DATA_HOME "${HOME:-$(echo ~)}/.local/share"
standin::setting XDG_CACHE_HOME "${HOME:-$(echo ~)}/.cache"
standin::setting XDG_RUNTIME_DIR /run
standin::setting ENROOT_SYSCONF_PATH @SYSCONF@
standin::setting ENROOT_RUNTIME_PATH "$XDG_RUNTIME_DIR/enroot"
standin::setting ENROOT_CACHE_PATH "$XDG_CACHE_HOME/enroot"
standin::setting ENROOT_DATA_PATH "$XDG_DATA_HOME/enroot"
standin::setting ENROOT_TEMP_PATH "${TMPDIR:-/tmp}"

for setting in $(compgen -e ENROOT_); do
    if [[ ${!setting} =~ ^(n|no|N|NO|No|f|false|F|False|FALSE)$ ]]; then unset "$setting"; fi
done

(umask 077 && mkdir -p "$ENROOT_CACHE_PATH" "$ENROOT_DATA_PATH" "$ENROOT_RUNTIME_PATH")

@END@

echo "enroot ${1-}: the sample world's stand-in has only enroot's configuration (enroot and pyxis are not packaged in Debian)" >&2
exit 1
"""


def write_enroot(bin_dir: Path, sysconf: Path) -> Path:
    """The stand-in as ``bin_dir/enroot``, reading ``sysconf/enroot.conf`` (as an enroot installed
    with that sysconfdir)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "enroot"
    script = _SCRIPT.replace("@BEGIN@", BEGIN).replace("@END@", END).replace("@SYSCONF@", shlex.quote(str(sysconf)))
    path.write_text(script)
    path.chmod(0o755)
    return path

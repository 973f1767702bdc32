#!/usr/bin/env bash
# Install what the sample cluster needs (Debian's slurmctld, slurmd, slurm-client and munge) when missing.
#
#   scripts/ensure-slurm.sh     idempotent: installs only missing packages, starts nothing
#
# The daemons are started by `python -m sampleworld cluster up`, with a private slurm.conf, munge key
# and ports in the sample world's state dir, so nothing here touches a system-wide Slurm or MUNGE.
# The packages' maintainer scripts would try to start the system services: a policy-rc.d that refuses
# service starts is in place for the length of the install (only when the machine has none of its own).
set -euo pipefail

PACKAGES=(slurmctld slurmd slurm-client munge)
POLICY=/usr/sbin/policy-rc.d

say() { echo "ensure-slurm: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
    say "installed: ${PACKAGES[*]}"
    exit 0
fi
[[ $(id -u) == 0 ]] || die "missing packages ${missing[*]} and not root; run: sudo apt-get install ${missing[*]}"

if [[ ! -e $POLICY ]]; then
    # Exit 101 = "action forbidden" (invoke-rc.d(8)): the install must not start a system slurmctld/munged.
    printf '#!/bin/sh\nexit 101\n' >"$POLICY"
    chmod 0755 "$POLICY"
    trap 'rm -f "$POLICY"' EXIT
fi
say "installing ${missing[*]} (apt-get update once first)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=300 "${missing[@]}" >&2
say "installed: ${PACKAGES[*]}"

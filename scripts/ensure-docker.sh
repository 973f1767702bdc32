#!/usr/bin/env bash
# Make a Docker engine answer on this machine, installing and starting one if needed.
#
#   scripts/ensure-docker.sh          install what is missing, start dockerd if no engine answers
#   scripts/ensure-docker.sh --stop   stop the dockerd THIS script started (by its recorded pid), nothing else
#
# Idempotent: when `docker info` already works it only reports the engine. A fresh CI machine has none of
# docker.io, docker-registry, debootstrap installed; the sample world (python -m sampleworld up) needs all three.
#
# Storage driver: overlay2 is tried first (measured here: an image build on vfs copies every layer in full,
# which makes the 18-step build many times slower and larger); vfs is the fallback for kernels or file
# systems where overlay mounts are refused. IMAGEBUILD_DOCKER_STORAGE_DRIVER forces one.
set -euo pipefail

PIDFILE=${IMAGEBUILD_DOCKERD_PIDFILE:-/run/imagebuild-dockerd.pid}
LOGFILE=${IMAGEBUILD_DOCKERD_LOG:-/var/log/imagebuild-dockerd.log}
LOCKFILE=/run/imagebuild-dockerd.lock
DOCKER_PIDFILE=/var/run/docker.pid
TIMEOUT=${IMAGEBUILD_DOCKERD_TIMEOUT:-90}
PACKAGES=(docker.io docker-registry debootstrap iproute2 zstd podman containernetworking-plugins
    charliecloud squashfuse squashfs-tools-ng squashfs-tools apt-utils gpg)
# zstd: importing zstd archives on Docker < 23. podman (and the CNI plugins its containers network with,
# only recommended): the Podman engine tests, sampleworld/podman_engine.py. charliecloud (0.31, its
# ch-run mounts a squashfs itself) and squashfuse: the `slurm --runtime charliecloud` jobs.
# squashfs-tools-ng (tar2sqfs, without root; sqfs2tar and rdsquashfs to read one): `export --format squashfs`.
# squashfs-tools (unsquashfs): what `enroot create` unpacks a squashfs with; the room a pyxis job's
# step 1 asks for is tested against it (tests/integration/test_unpack_room.py).
# apt-utils (apt-ftparchive) and gpg: the sample world's signed apt snapshots (sampleworld/apt_archive.py).

say() { echo "ensure-docker: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

pid_alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

# The pid recorded in our pid file, but only while it is still a dockerd (pids get reused).
our_dockerd_pid() {
    local pid
    [[ -s "$PIDFILE" ]] || return 1
    pid=$(cat "$PIDFILE")
    pid_alive "$pid" || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == dockerd ]] || return 1
    echo "$pid"
}

engine_answers() { timeout 20 docker info >/dev/null 2>&1; }

report() {
    local driver
    driver=$(docker info --format '{{.Driver}}' 2>/dev/null || echo unknown)
    say "docker engine answers (storage driver: $driver)"
}

stop_ours() {
    local pid
    if ! pid=$(our_dockerd_pid); then
        say "no dockerd started by this script is running; nothing to stop"
        return 0
    fi
    say "stopping dockerd pid $pid (started by this script)"
    kill -TERM "$pid"
    for _ in $(seq 1 30); do
        pid_alive "$pid" || { rm -f "$PIDFILE"; say "stopped"; return 0; }
        sleep 1
    done
    die "dockerd pid $pid did not stop within 30 s; see $LOGFILE"
}

install_missing() {
    local missing=() pkg
    for pkg in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return 0
    [[ $(id -u) == 0 ]] || die "missing packages ${missing[*]} and not root; run: sudo apt-get install ${missing[*]}"
    say "installing ${missing[*]} (apt-get update once first)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    # The package's postinst may try to start the service; this sandbox has no init, so we start it below.
}

# dockerd refuses to start while /var/run/docker.pid names a live process; a dead one is only stale.
clear_stale_docker_pid() {
    local pid
    [[ -s "$DOCKER_PIDFILE" ]] || return 0
    pid=$(cat "$DOCKER_PIDFILE")
    if pid_alive "$pid"; then
        return 1
    fi
    say "removing stale $DOCKER_PIDFILE (pid $pid is not alive)"
    rm -f "$DOCKER_PIDFILE"
}

wait_for_engine() {
    local pid=$1 deadline=$((SECONDS + TIMEOUT))
    while ((SECONDS < deadline)); do
        engine_answers && return 0
        pid_alive "$pid" || return 1
        sleep 1
    done
    return 1
}

start_dockerd() {
    local driver=$1 pid
    say "starting dockerd with storage driver $driver (log: $LOGFILE)"
    mkdir -p "$(dirname "$LOGFILE")" "$(dirname "$PIDFILE")"
    echo "=== $(date -u +%FT%TZ) ensure-docker: dockerd --storage-driver=$driver" >>"$LOGFILE"
    # setsid: the daemon must outlive this script and the shell that ran it.
    setsid dockerd --storage-driver="$driver" >>"$LOGFILE" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PIDFILE"
    if wait_for_engine "$pid"; then
        say "dockerd pid $pid is up after $SECONDS s"
        return 0
    fi
    if pid_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        sleep 3
    fi
    rm -f "$PIDFILE"
    say "dockerd with $driver did not come up within ${TIMEOUT}s; last log lines:"
    tail -n 8 "$LOGFILE" >&2 || true
    return 1
}

main() {
    if [[ "${1:-}" == "--stop" ]]; then
        stop_ours
        return
    fi
    install_missing
    if engine_answers; then
        report
        return 0
    fi
    # Serialise concurrent callers (several engineers share this machine) so only one starts dockerd.
    exec 9>"$LOCKFILE"
    flock -w "$((TIMEOUT * 2))" 9 || die "could not take $LOCKFILE within $((TIMEOUT * 2)) s"
    if engine_answers; then
        report
        return 0
    fi
    if our_dockerd_pid >/dev/null; then
        say "our dockerd (pid $(our_dockerd_pid)) is running but not answering yet; waiting"
        wait_for_engine "$(our_dockerd_pid)" && { report; return 0; }
        die "our dockerd pid $(our_dockerd_pid) does not answer after ${TIMEOUT}s; see $LOGFILE, or stop it: $0 --stop"
    fi
    if ! clear_stale_docker_pid; then
        die "a dockerd we did not start (pid $(cat "$DOCKER_PIDFILE")) is alive but 'docker info' fails; not touching it. Check DOCKER_HOST and that daemon's log."
    fi
    local drivers=(overlay2 vfs) driver
    [[ -n "${IMAGEBUILD_DOCKER_STORAGE_DRIVER:-}" ]] && drivers=("$IMAGEBUILD_DOCKER_STORAGE_DRIVER")
    for driver in "${drivers[@]}"; do
        if start_dockerd "$driver"; then
            report
            return 0
        fi
        clear_stale_docker_pid || true
    done
    die "no docker engine could be started (tried: ${drivers[*]}); see $LOGFILE"
}

main "$@"

"""What pyxis and Charliecloud share: a squashfs on shared storage, checked on every node and run in
place (nothing is copied or imported), by runtimes that make no PID namespace and keep no daemon."""

from __future__ import annotations

from imagebuild.slurm.job import ArchivedImage, Job
from imagebuild.slurm.runtimes import SQUASHFS, Runtime
from imagebuild.slurm.shell import quote

# settings() lines that mean nothing without an engine (the job refuses the options that set them),
# nor with the host's /dev and no PID namespace.
_NO_ENGINE_NOTES: dict[str, str | None] = {
    "STOP_TIMEOUT_S": None, "SHM_SIZE": None, "DOCKER_ARGS": None, "INIT": None, "DEVICES": None,
    "NO_DEVICES": None,
}  # fmt: skip


def squashfs_runtime(
    *,
    name: str,
    binary: str,
    needs: str,
    ulimits_note: str | None,
    run_node: str,
    functions: tuple[str, ...],
    run_step: str,
    unpack_into: str = "",
    no_room_hint: str = "",
) -> Runtime:
    """A runtime that runs the manifest's squashfs in place; it has no cleanup step (nothing is left).
    ``unpack_into``: the function (in ``run_node``) that prints the directory the runtime unpacks the
    squashfs into on a node, whose room step 1 then checks ("" for a runtime that unpacks nothing);
    ``no_room_hint``: what step 1 says when that directory lacks the room ($into is the directory)."""
    return Runtime(
        name=name, kinds=(SQUASHFS,), pulls=False, tools=lambda job: tools(needs), source=source,
        image_settings=image_settings, settings_notes={**_NO_ENGINE_NOTES, "ULIMITS": ulimits_note},
        fetch=lambda job: fetch(binary, unpack_into, no_room_hint), helpers="", run_node=run_node, cleanup="",
        functions=("node_address", "fetch_image", *functions), run_step=run_step, cleanup_step="",
    )  # fmt: skip


def image_settings(job: Job) -> str:
    assert isinstance(job.image, ArchivedImage)
    return (
        "    # The squashfs on shared storage, run in place, and beside it its manifest and the importer\n"
        "    # `imagebuild export` wrote, which checks it on every node (size, sha256, superblock).\n"
        f"    ARCHIVE_MANIFEST={quote(job.image.manifest)}\n"
        f"    ARCHIVE_IMPORTER={quote(job.image.importer)}\n"
        f"    SQUASHFS={quote(job.image.archive)}"
    )


def fetch(binary: str, unpack_into: str = "", no_room_hint: str = "") -> str:
    """Step 1: the runtime's binary is there and the squashfs is the manifest's, on every node; where
    the runtime unpacks it (``unpack_into``), that directory has the room, checked first."""
    if unpack_into:
        room = f"""
    # The room it is unpacked into, checked before the archive is read (the importer's --unpack-into;
    # its exit 1: not enough).
    local into status=0
    into=$({unpack_into})"""
        check = f"""--check-only ${{into:+--unpack-into "$into"}} >/dev/null || status=$?
    if ((status == 1)) && [[ -n $into ]]; then say "{no_room_hint}"; fi
    if ((status != 0)); then return "$status"; fi"""
    else:
        room, check = "", "--check-only >/dev/null"
    return f"""\
# Step 1, on every node: the runtime is installed, and the squashfs is the one the manifest names
# (the importer checks its size, sha256 and superblock and starts nothing). Nothing is copied: every
# node runs the file where it lies.
fetch_image() {{
    settings
    if ! command -v {binary} >/dev/null; then
        say "{binary} is not installed on ${{SLURMD_NODENAME:-$(hostname)}}: this job needs it on every node (or use another --runtime)"
        return 127
    fi{room}
    say "checking $SQUASHFS"
    python3 "$ARCHIVE_IMPORTER" "$ARCHIVE_MANIFEST" {check}
    say "image present: $SQUASHFS"
}}"""


def tools(binary: str) -> str:
    return f"{binary} and python3 (the importer's check)"


def source(job: Job) -> str:
    return "checks the squashfs on shared storage, which it runs in place"

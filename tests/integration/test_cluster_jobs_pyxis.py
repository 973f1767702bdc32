"""The sbatch job of `imagebuild slurm --runtime pyxis`, its step 1, run for real on the sample cluster.

enroot and pyxis are not packaged in Debian, so step 2 (srun's --container-image, pyxis's option)
cannot run here. Step 1 can: on each node enroot is there (the sample world's stand-in, which has
enroot's configuration block: ``sampleworld.enroot_standin``), the directory ``enroot create`` would
unpack the squashfs into is read from the node's enroot.conf as enroot reads it, its room is checked,
then the squashfs against its manifest. The nodes' enroot.conf puts each node's data directory on a
tmpfs of its own: node1's half the room the squashfs takes unpacked, node2's exactly that room.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest

from sampleworld.cluster import Cluster, node_programs
from sampleworld.enroot_standin import write_enroot
from sampleworld.pytest_plugin import sample_world_state_dir
from tests.integration.cluster_support import (
    JobDirs,
    fails_before_any_container,
    lines_of,
    render_job,
    submit_and_wait,
)
from tests.integration.tmpfs import tmpfs
from tests.prerequisites import skip_or_fail

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_node_whose_enroot_data_directory_lacks_the_room_fails_step_1_naming_itself(
    sample_cluster: Cluster, sample_export: Callable[[str], Path], tmp_path: Path
) -> None:
    if shutil.which("tar2sqfs") is None:
        skip_or_fail("tar2sqfs is not installed (scripts/ensure-docker.sh installs squashfs-tools-ng)")
    manifest = sample_export("squashfs")
    data = json.loads(manifest.read_text())
    needed, archive = int(data["unpacked_bytes"]), manifest.parent / str(data["archive"])
    sysconf, disks = tmp_path / "etc-enroot", tmp_path / "tmpfs"
    sysconf.mkdir()
    # As a site's enroot.conf: per node and per user, expanded by enroot on the node.
    (sysconf / "enroot.conf").write_text(f"ENROOT_DATA_PATH {disks}/${{SLURMD_NODENAME}}/enroot-data/user-$(id -u)\n")
    enroot = write_enroot(tmp_path / "enroot-bin", sysconf)
    dirs = JobDirs.create(tmp_path / "job")
    render_job(sample_cluster, dirs, "--archive", str(manifest), runtime="pyxis")
    with ExitStack() as stack:
        for node, size in (("node1", needed // 2), ("node2", needed)):
            stack.enter_context(tmpfs(disks / node, size))
            stack.enter_context(node_programs(sample_world_state_dir(), node, added={"enroot": enroot}))
        result = submit_and_wait(sample_cluster, dirs)
    print(f"pyxis step-1 job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s")

    fails_before_any_container(result, "1:0")
    node1, node2 = ("\n".join(lines_of(result, task)) for task in (0, 1))
    errors = [line for line in node1.splitlines() if "imagebuild-import: error:" in line]
    assert len(errors) == 1, result.output
    print(errors[0])
    assert f"to unpack {archive.name}: {disks}/node1, on tmpfs, has 0.56 GB free" in errors[0]
    assert f"the image unpacked into {disks}/node1/enroot-data/user-0 takes 1.12 GB" in errors[0]
    assert "size and sha256" not in node1  # refused before the squashfs was read
    assert f"{disks}/node1/enroot-data/user-0 is enroot's data directory on this node (ENROOT_DATA_PATH" in node1
    assert f"room to unpack: {disks}/node2/enroot-data/user-0 has 1.12 GB free, 1.12 GB needed" in node2
    assert f"squashfs of {data['image_id']}, size and sha256 as the manifest says" in node2
    assert f"image present: {archive}" in node2
    assert not any((disks / node / "enroot-data").exists() for node in ("node1", "node2"))  # nothing made

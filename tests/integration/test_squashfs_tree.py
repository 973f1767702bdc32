"""The squashfs `export --format squashfs` writes (what enroot and Charliecloud run) against the image's
own tree, file by file.

The image's tree is the engine's, not imagebuild's: `docker export` of a container created from the
sample image (overlayfs applied the layers; the container never ran). The squashfs is read back by
squashfs-tools-ng's `sqfs2tar`. Every path is compared by type, permission bits, owner, size, sha256
of its content, symlink target and hard-link group. What differs must be exactly what is meant to:

* docker's own files in every container it creates (its init layer: `/.dockerenv`, the
  `/etc/hostname`, `/etc/hosts` and `/etc/resolv.conf` it mounts over, `/etc/mtab`, the `/dev`,
  `/proc` and `/sys` entries of its mounts);
* the runtime files of imagebuild.distribute.runtime_files (enroot's `/etc/environment`, `/etc/rc`,
  `/etc/rc.local`, `/etc/fstab`; Charliecloud's `/ch/environment`), whose content is checked
  against the image's config;
* the mount points a job binds onto (imagebuild.inputs.layout.MOUNT_POINTS) where the image has none.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import pytest

from imagebuild.distribute.runtime_files import runtime_files
from imagebuild.inputs.layout import MOUNT_POINTS
from tests.prerequisites import skip_or_fail

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# What `docker create` puts in every container, whatever the image (the engine's init layer, moby's
# daemon/initlayer): mount points, marker files and the /etc/mtab symlink to /proc/mounts.
DOCKER_ADDS = {
    ".dockerenv", "etc/hostname", "etc/hosts", "etc/resolv.conf", "etc/mtab", "dev/console", "dev/pts", "dev/shm",
}  # fmt: skip


@dataclass(frozen=True)
class Node:
    kind: str  # file, dir, symlink, chr, blk, fifo
    mode: int
    uid: int
    gid: int
    size: int = 0
    sha256: str = ""
    target: str = ""  # a symlink's
    links: frozenset[str] = frozenset()  # every name of a hard-linked file (empty for one name)


KINDS = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "dir", tarfile.SYMTYPE: "symlink",
         tarfile.CHRTYPE: "chr", tarfile.BLKTYPE: "blk", tarfile.FIFOTYPE: "fifo"}  # fmt: skip


def _path(name: str) -> str:
    return name.removeprefix("./").rstrip("/") if name not in ("", ".", "./") else ""


def read_tree(stream: IO[bytes]) -> dict[str, Node]:
    """Path (no leading /; "" for the root) -> Node, of a tar stream; hard links resolved into groups."""
    tree: dict[str, Node] = {}
    groups: dict[str, set[str]] = {}  # first name -> every name
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for info in tar:
            path = _path(info.name)
            if info.islnk():
                first = _path(info.linkname)
                groups.setdefault(first, {first}).add(path)
                tree[path] = tree[first]
                continue
            digest = ""
            if info.isreg():
                handle = tar.extractfile(info)
                assert handle is not None
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
            tree[path] = Node(
                kind=KINDS[info.type], mode=info.mode & 0o7777, uid=info.uid, gid=info.gid,
                size=info.size if info.isreg() else 0, sha256=digest, target=info.linkname if info.issym() else "",
            )  # fmt: skip
    for names in groups.values():
        for name in names:
            tree[name] = replace(tree[name], links=frozenset(names))
    return tree


@contextmanager
def _streamed(argv: list[str]) -> Iterator[IO[bytes]]:
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    try:
        yield process.stdout
    finally:
        process.stdout.close()
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, f"{argv[0]} failed: {err.decode(errors='replace')[-2000:]}"


@pytest.fixture(scope="module")
def image_tree(sample_image: dict[str, object]) -> dict[str, Node]:
    """The sample image's tree as the engine builds it for a container: `docker export`."""
    # A command, which is never run: the image has no entrypoint and no command of its own.
    created = subprocess.run(["docker", "create", str(sample_image["image_id"]), "true"], capture_output=True,
                             text=True, timeout=120, check=True).stdout.strip()  # fmt: skip
    try:
        with _streamed(["docker", "export", created]) as stream:
            return read_tree(stream)
    finally:
        subprocess.run(["docker", "rm", "--force", created], capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def squashfs_tree(sample_export: Callable[[str], Path]) -> dict[str, Node]:
    """The squashfs export read back by sqfs2tar, the root's own entry included."""
    tool = shutil.which("sqfs2tar")
    if tool is None:
        skip_or_fail("sqfs2tar (squashfs-tools-ng) is not installed")
    manifest = sample_export("squashfs")
    archive = manifest.parent / str(json.loads(manifest.read_text())["archive"])
    with _streamed([tool, "--root-becomes", ".", "--no-skip", str(archive)]) as stream:
        return read_tree(stream)


def _config(sample_image: dict[str, object]) -> dict[str, object]:
    done = subprocess.run(["docker", "image", "inspect", str(sample_image["image_id"])], capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    (inspect,) = json.loads(done.stdout)
    return {"config": inspect["Config"]}


def _docker_additions(tree: dict[str, Node]) -> set[str]:
    """The paths docker made for the container: its files, and what lies under its /dev, /proc, /sys mounts."""
    return {p for p in tree if p in DOCKER_ADDS or p.startswith(("dev/", "proc/", "sys/"))}


def test_every_file_of_the_image_is_in_the_squashfs_as_the_engine_has_it(
    image_tree: dict[str, Node], squashfs_tree: dict[str, Node], sample_image: dict[str, object]
) -> None:
    added = runtime_files(_config(sample_image))
    replaced = {path for path in added if path in image_tree}
    docker_made = _docker_additions(image_tree)
    compared = sorted(set(image_tree) - docker_made - replaced)
    print(f"{len(compared)} paths compared; docker's own: {sorted(docker_made)}; replaced: {sorted(replaced)}")
    assert len(compared) > 1000  # the whole root, not a subtree

    different = {
        path: (image_tree[path], squashfs_tree.get(path)) for path in compared if squashfs_tree.get(path) != image_tree[path]
    }
    assert different == {}, "\n".join(f"/{p}: image {a}, squashfs {b}" for p, (a, b) in list(different.items())[:20])


def test_the_squashfs_adds_exactly_the_runtime_files_and_the_mount_points(
    image_tree: dict[str, Node], squashfs_tree: dict[str, Node], sample_image: dict[str, object]
) -> None:
    added = runtime_files(_config(sample_image))
    assert (squashfs_tree[""].kind, squashfs_tree[""].mode) == ("dir", 0o755)
    extra = set(squashfs_tree) - set(image_tree) - {""}  # docker export writes no entry for the root
    mount_points = {point.strip("/") for point in MOUNT_POINTS} - set(image_tree)
    new_parents = {p for p in extra if any(f.startswith(f"{p}/") for f in (*added, *mount_points))}
    assert extra == (set(added) - set(image_tree)) | mount_points | new_parents
    for path, data in added.items():
        node = squashfs_tree[path]
        assert (node.kind, node.size, node.sha256) == ("file", len(data), hashlib.sha256(data).hexdigest()), path
        assert node.mode == (0o755 if path == "etc/rc" else 0o644), path
    for point in mount_points | new_parents:
        assert (squashfs_tree[point].kind, squashfs_tree[point].mode) == ("dir", 0o755), point
    # What a job binds onto is there, whether the image had it or the export made it.
    for point in MOUNT_POINTS:
        assert squashfs_tree[point.strip("/")].kind == "dir", point

"""Gathering for the SBOM and provenance: what the image's layers hold, input files taken before the build, labels."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from imagebuild.attest.image_contents import (
    LayerEntries,
    entries_of_directory,
    entries_of_tar,
    flatten,
    image_contents,
    parse_dpkg_status,
    parse_metadata,
    parse_os_release,
    read_image_contents,
)
from imagebuild.build.attestations import AttestationPaths
from imagebuild.build.core import BuildOptions, build_image, prepare_build
from imagebuild.build.prepare import input_files
from imagebuild.engine.containerd_store import stored_image
from imagebuild.engine.interface import BuildEvent, BuildRequest
from imagebuild.inputs.layout import sbom_file_name
from imagebuild.project import find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.render.context import build_context, inputs_digest
from imagebuild.testing import FakeClock, FakeEngine, Recording, image_info, image_root_files, saved_image_tar
from imagebuild.testing.archives import layer_tar
from tests import REPO
from tests.unit.imagetars import config, content_store_image, digest

BUILD_STREAMS = REPO / "tests" / "data" / "build_streams"


def layer(files: dict[str, bytes]) -> LayerEntries:
    return entries_of_tar(io.BytesIO(saved_layer_tar(files)))


def saved_layer_tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


SITE = "usr/local/lib/python3.12/site-packages"


def metadata(name: str, version: str, *requires: str) -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    return ("\n".join(lines) + "\n\nBody: not a header\n").encode()


def test_the_flattened_image_honours_whiteouts_opaque_directories_and_the_highest_layer() -> None:
    base = layer({
        f"{SITE}/gone-1.0.dist-info/METADATA": metadata("gone", "1.0"),
        f"{SITE}/kept-1.0.dist-info/METADATA": metadata("kept", "1.0"),
        "opt/venv/lib/python3.12/site-packages/hidden-1.0.dist-info/METADATA": metadata("hidden", "1.0"),
        f"{SITE}/upgraded-1.0.dist-info/METADATA": metadata("upgraded", "1.0"),
        "var/lib/dpkg/status": b"Package: old\nStatus: install ok installed\nVersion: 1\n",
    })
    build_tar = saved_layer_tar({
        f"{SITE}/.wh.gone-1.0.dist-info": b"",
        "opt/venv/.wh..wh..opq": b"",
        f"{SITE}/upgraded-1.0.dist-info/METADATA": metadata("upgraded", "2.0"),
        "var/lib/dpkg/status": b"Package: new\nStatus: install ok installed\nVersion: 2\n",
        "usr/lib/python3/dist-packages/debian_dist-0.1.dist-info/METADATA": metadata("debian-dist", "0.1"),
        "usr/lib/python3/dist-packages/not-a-dist.txt": b"x",
    })
    build = entries_of_tar(io.BytesIO(build_tar))
    assert build.diff_id == "sha256:" + hashlib.sha256(build_tar).hexdigest()  # the whole tar is read
    files = flatten([base, build])
    contents = image_contents(files, base_layers=1)
    assert {(d.name, d.version, d.layer) for d in contents.python} == {
        ("kept", "1.0", 0), ("upgraded", "2.0", 1), ("debian-dist", "0.1", 1),
    }
    assert [p.name for p in contents.debian] == ["new"]
    assert contents.from_base(0)
    assert not contents.from_base(1)


def test_dpkg_status_keeps_installed_packages_with_their_relations() -> None:
    status = (
        "Package: bash\nStatus: install ok installed\nArchitecture: amd64\nVersion: 5.2\n"
        "Pre-Depends: libc6 (>= 2.36), libtinfo6:any\nDepends: base-files (>= 2.1.12), debianutils (>= 5.6-0.1) | busybox\n"
        "Description: GNU Bourne Again SHell\n Bash is an sh-compatible shell\n\n"
        "Package: removed\nStatus: deinstall ok config-files\nVersion: 1\n\n"
        "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nSource: glibc (2.36-9)\nVersion: 2.36-9\n"
    )
    bash, libc = parse_dpkg_status(status, layer=0)
    assert (bash.name, bash.version, bash.architecture) == ("bash", "5.2", "amd64")
    assert bash.depends == (("libc6",), ("libtinfo6",), ("base-files",), ("debianutils", "busybox"))
    assert (libc.name, libc.source) == ("libc6", "glibc")


def test_os_release_and_metadata_parse_as_their_formats_say() -> None:
    release = parse_os_release('PRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n# comment\n')
    assert release is not None
    assert (release.id, release.version_id, release.distro) == ("ubuntu", "22.04", "ubuntu-22.04")
    dist = parse_metadata(metadata("torch", "2.5.1", "filelock", "sympy (>=1.13)", 'opt-einsum; extra == "opt"', "bad req ((").decode(), "/x", 0)
    assert dist is not None
    assert (dist.name, dist.version, dist.requires) == ("torch", "2.5.1", ("filelock", "sympy"))


def test_the_image_is_read_from_its_save_when_the_layer_store_cannot_be(tmp_path: Path) -> None:
    engine = FakeEngine()
    tar = saved_image_tar([image_root_files((("pip", "23.0.1"),)), {"usr/lib/python3/dist-packages/tqdm-4.70.1.dist-info/METADATA": metadata("tqdm", "4.70.1")}])
    engine.saved["sha256:" + "1" * 64] = tar
    engine.images.append(image_info("sha256:" + "1" * 64, tags=["img:1"]))
    base = [layer(image_root_files((("pip", "23.0.1"),))).diff_id]
    contents = read_image_contents(engine, "img:1", base_diff_ids=base)
    assert contents.base_layers == 1
    assert {(d.name, d.layer) for d in contents.python} == {("pip", 0), ("tqdm", 1)}
    assert contents.os is not None
    assert contents.os.distro == "debian-12"
    assert [p.name for p in contents.debian] == ["bash", "libc6"]


def test_the_image_is_read_from_the_containerd_store_s_blobs_where_they_are_readable(tmp_path: Path) -> None:
    files = [image_root_files((("pip", "23.0.1"),)), {"usr/lib/python3/dist-packages/tqdm-4.70.1.dist-info/METADATA": metadata("tqdm", "4.70.1")}]
    layers = [layer_tar(f) for f in files]
    image_id = content_store_image(layers, config(layers), tmp_path)
    engine = FakeEngine(refuse_save="save must not be asked")
    engine.images.append(image_info(image_id, tags=["img:1"]))
    engine.stored[image_id] = stored_image(image_id, data_root=str(tmp_path))
    contents = read_image_contents(engine, "img:1", base_diff_ids=[digest(layers[0])])
    assert contents.base_layers == 1
    assert {(d.name, d.layer) for d in contents.python} == {("pip", 0), ("tqdm", 1)}
    assert [p.name for p in contents.debian] == ["bash", "libc6"]


def test_the_image_is_read_from_the_layer_store_where_it_is_readable(tmp_path: Path) -> None:
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    for root, files in ((lower, image_root_files((("pip", "23.0.1"), ("gone", "1.0")))), (upper, {})):
        root.mkdir()
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
    (upper / "usr/lib/python3/dist-packages").mkdir(parents=True)
    os.mknod(upper / "usr/lib/python3/dist-packages/gone-1.0.dist-info", stat.S_IFCHR | 0o600, 0)  # overlay2's whiteout
    layers = [entries_of_directory(lower, "sha256:" + "a" * 64), entries_of_directory(upper, "sha256:" + "b" * 64)]
    contents = image_contents(flatten(layers), base_layers=1)
    assert [d.name for d in contents.python] == ["pip"]


def test_documents_are_named_by_the_image_and_labels_carry_what_is_known_before_the_build(tmp_path: Path) -> None:
    paths = AttestationPaths.beside(tmp_path / "gfx942.build.json", "gfx942", "sha256:" + "ab" * 32)
    assert paths.sbom == tmp_path / f"gfx942-{'ab' * 6}.sbom.cdx.json"
    assert paths.provenance == tmp_path / f"gfx942-{'ab' * 6}.provenance.intoto.json"
    assert paths.envelopes() == (tmp_path / f"gfx942-{'ab' * 6}.sbom.dsse.json", tmp_path / f"gfx942-{'ab' * 6}.provenance.dsse.json")
    assert sbom_file_name("gfx942") == "gfx942.sbom.cdx.json"  # what the image's SBOM label holds: kind and arch
    assert inputs_digest(b"context bytes") == "sha256:" + hashlib.sha256(b"context bytes").hexdigest()


def test_input_files_name_pins_lock_stages_arch_constraints_dockerfile_context(project: Path) -> None:
    found = find_project(project)
    inputs = found.load("gfx942")
    context = build_context(render_inputs(inputs, RenderOptions(allow_unpinned=True)), inputs)
    names = [f.name for f in input_files(found, inputs, context)]
    assert names[:3] == ["pins.toml", "pylock.toml", "stages/01-base.toml"]
    assert "stages/image.toml" in names
    assert "stages/arch/gfx942.toml" in names
    assert "constraints/build.txt" in names
    assert names[-2:] == ["Dockerfile", "build-context.tar"]


@dataclass
class EditingEngine(FakeEngine):
    """A FakeEngine that lets someone edit the checkout while the build runs, after its first message."""

    edit_checkout: Path | None = None

    def build(self, request: BuildRequest) -> Iterator[BuildEvent]:
        for number, event in enumerate(super().build(request)):
            if number == 1 and self.edit_checkout is not None:
                with (self.edit_checkout / "stages" / "07-vllm.toml").open("a") as stage:
                    stage.write("# edited while the build ran\n")
                (self.edit_checkout / "pylock.toml").unlink()
            yield event


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_documents_describe_the_inputs_as_they_were_when_the_build_started(
    project: Path, tmp_path: Path
) -> None:
    """A build can take an hour: a stage edited and the lock removed meanwhile change neither document."""
    for name in ("pins.toml", "pylock.toml", "apt.lock.toml"):  # the recorded, locked sample pins
        shutil.copy(BUILD_STREAMS / name, project / name)
    stage, lock = project / "stages" / "07-vllm.toml", project / "pylock.toml"
    rendered = {"stages/07-vllm.toml": sha256(stage), "pylock.toml": sha256(lock)}
    locked = {p["name"] for p in tomllib.loads(lock.read_text())["packages"]}
    checkout = find_project(project)
    clock = FakeClock()
    engine = EditingEngine(builds=[Recording.load(BUILD_STREAMS / "success.jsonl")], clock=clock, edit_checkout=project)
    options = BuildOptions(arch="gfx942", record_path=tmp_path / "out" / "r.json", normalize=False)
    record = build_image(prepare_build(checkout, checkout.load("gfx942"), options), engine, clock=clock)

    assert sha256(stage) != rendered["stages/07-vllm.toml"]  # the edits happened
    assert not lock.exists()
    statement = json.loads(record.provenance.read_text())
    digests = {
        d["name"]: d.get("digest") for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    }
    assert {name: digests[name] for name in rendered} == {name: {"sha256": h} for name, h in rendered.items()}
    sbom = json.loads(record.sbom.read_text())
    in_sbom = {c["name"] for c in sbom["components"] if c["bom-ref"].startswith("pylock:")}
    assert in_sbom  # the lock as loaded, not as the disk holds it now
    assert in_sbom <= locked

"""Gathering for the SBOM and provenance: the image's pip inventory, input files taken before the build, labels."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

from imagebuild.build.attestations import (
    INVENTORY_SCRIPT,
    AttestationPaths,
    read_inventory,
)
from imagebuild.build.core import BuildOptions, build_image, prepare_build
from imagebuild.build.prepare import input_files
from imagebuild.build.sbom import InstalledDistribution
from imagebuild.engine.interface import BuildEvent, BuildRequest, Engine, ImageInfo, PushEvent
from imagebuild.errors import AttestationError
from imagebuild.inputs.layout import sbom_file_name
from imagebuild.project import find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.render.context import build_context, inputs_digest
from imagebuild.testing import FakeClock, FakeEngine, Recording
from tests import REPO

BUILD_STREAMS = REPO / "tests" / "data" / "build_streams"


class RunOnlyEngine(Engine):
    """Answers `run` with a fixed exit code and output; the build calls are not used here."""

    def __init__(self, code: int, output: str) -> None:
        self.code, self.output = code, output
        self.commands: list[list[str]] = []

    @property
    def address(self) -> str:
        return "fake://"

    def build(self, request: BuildRequest) -> Iterator[BuildEvent]:
        raise NotImplementedError

    def tag(self, image_id: str, name: str) -> None:
        raise NotImplementedError

    def inspect_image(self, ref: str) -> ImageInfo:
        raise NotImplementedError

    def run(self, image: str, command: list[str], *, network_mode: str | None = None) -> tuple[int, str]:
        self.commands.append(command)
        return self.code, self.output

    def start(self, image: str, *, network_mode: str | None = None) -> str:
        raise NotImplementedError

    def remove(self, container_id: str) -> None:
        raise NotImplementedError

    def push(self, repository: str, tag: str) -> Iterator[PushEvent]:
        raise NotImplementedError

    def pull(self, reference: str) -> str:
        raise NotImplementedError

    def save(self, image_id: str) -> Iterator[bytes]:
        raise NotImplementedError

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        raise NotImplementedError

    def has_image(self, image_id: str) -> bool:
        raise NotImplementedError

    def image_ids(self) -> frozenset[str]:
        raise NotImplementedError

    def tag_table(self) -> dict[str, str]:
        raise NotImplementedError

    def untag(self, name: str) -> None:
        raise NotImplementedError

    def remove_image(self, image_id: str) -> None:
        raise NotImplementedError


def test_inventory_is_read_by_the_image_python_ignoring_noise() -> None:
    engine = RunOnlyEngine(0, 'some warning\nimagebuild-inventory:[["pip", "23.0.1"], ["tqdm", "4.70.1"]]\n')
    assert read_inventory(engine, "sha256:abc") == (
        InstalledDistribution(name="pip", version="23.0.1"),
        InstalledDistribution(name="tqdm", version="4.70.1"),
    )
    assert engine.commands[0][:3] == ["python3", "-I", "-c"]


def test_inventory_script_runs_on_a_real_python() -> None:
    out = subprocess.run(
        [sys.executable, "-I", "-c", INVENTORY_SCRIPT], capture_output=True, text=True, check=True
    ).stdout
    inventory = read_inventory(RunOnlyEngine(0, out), "host")
    assert InstalledDistribution(name="packaging", version=version("packaging")) in inventory


def test_inventory_failure_names_the_image_and_the_cause() -> None:
    engine = RunOnlyEngine(127, "exec: python3: not found\n")
    with pytest.raises(
        AttestationError, match=r"pip inventory of img for the SBOM \(exit 127: exec: python3: not found\)"
    ):
        read_inventory(engine, "img")


def test_labels_carry_what_is_known_before_the_build(tmp_path: Path) -> None:
    paths = AttestationPaths.beside(tmp_path / "gfx942.build.json", "gfx942")
    assert paths.sbom == tmp_path / "gfx942.sbom.cdx.json"
    assert paths.provenance == tmp_path / "gfx942.provenance.intoto.json"
    assert sbom_file_name("gfx942") == paths.sbom.name  # what the image's SBOM label holds
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
    for name in ("pins.toml", "pylock.toml"):  # the recorded, locked sample pins
        shutil.copy(BUILD_STREAMS / name, project / name)
    stage, lock = project / "stages" / "07-vllm.toml", project / "pylock.toml"
    rendered = {"stages/07-vllm.toml": sha256(stage), "pylock.toml": sha256(lock)}
    locked = {p["name"] for p in tomllib.loads(lock.read_text())["packages"]}
    checkout = find_project(project)
    inventory = (BUILD_STREAMS / "inventory.txt").read_text()
    clock = FakeClock()
    engine = EditingEngine(
        builds=[Recording.load(BUILD_STREAMS / "success.jsonl")],
        clock=clock,
        run_result=lambda _image, command: (0, inventory if INVENTORY_SCRIPT in command else ""),
        edit_checkout=project,
    )
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

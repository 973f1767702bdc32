"""`imagebuild build` for real: the full 18-step gfx942 image against the sample world."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

import docker
from imagebuild.build.sbom import validate_sbom
from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.errors import EngineError, ExitCode
from imagebuild.inputs.python_lock import lock_path_for, require_python_lock
from imagebuild.inputs.stage_model import BUILD_GROUP
from imagebuild.normalize import ahead as ahead_module
from imagebuild.pins import PinSet, load_pins
from imagebuild.project import find_project
from sampleworld.layout import BAD_SHA
from tests import REPO
from tests.integration.image_support import CHECKOUT, remove_images

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]


def gfx942_pins(pins: Path) -> PinSet:
    """The pins the gfx942 image consumes (a pin with `arches` belongs to those profiles only)."""
    return find_project(REPO, pins).load("gfx942").pins


def build(pins: Path, record: Path, *extra: str) -> int:
    return main(["build", "--pins", str(pins), "--network", "host", "--record", str(record), *extra])


@pytest.fixture
def built(sample_image: dict[str, object]) -> dict[str, object]:
    """The session's one build of the sample image (conftest), shared with the cluster tests."""
    return sample_image


def test_full_build_has_18_steps_labels_and_versions(
    built: dict[str, object], locked_pins: Path, engine: DockerEngine
) -> None:
    steps = built["steps"]
    assert isinstance(steps, list)
    assert [s["number"] for s in steps] == list(range(1, 19))
    info = engine.inspect_image(str(built["tag"]))
    assert info.id == built["image_id"]
    assert info.entrypoint in (None, ())
    assert info.workdir == "/app"
    pins = gfx942_pins(locked_pins)  # the sample pins hold gfx950's donor too: not this image's
    for pin in pins:
        assert info.labels[f"io.imagebuild.pin.{pin.name}"] == pin.identity
    assert "io.imagebuild.pin.donor_mi355x" not in info.labels
    for key in ("source", "revision", "created", "version"):
        assert info.labels[f"org.opencontainers.image.{key}"]
    code, versions = engine.run(str(built["tag"]), ["cat", "/app/versions.txt"])
    assert code == 0
    for name, prefix in (("mori", "MORI_REF"), ("vllm", "VLLM_REF"), ("router", "VLLM_ROUTER_REF")):
        assert f"{prefix}={pins.get(name).identity}" in versions
    assert "AITER_VERSION=0.1.19" in versions
    assert "FLYDSL_REPIN=0.2.4 (after proven_k3 graft)" in versions
    assert "BUILD_SETUPTOOLS=79." in versions
    code, out = engine.run(
        str(built["tag"]),
        ["python3", "/opt/imagebuild/launcher/serve.py", "--help"],
    )
    assert code == 0, out


def test_mori_s_isolated_build_used_exactly_the_locked_build_dependencies(
    built: dict[str, object], locked_pins: Path, engine: DockerEngine
) -> None:
    """MoRI's build-system.requires resolve from the index inside pip's build isolation: the build
    constraint must give each the version pylock.toml locks (the sample MoRI records what it used)."""
    pins = load_pins(locked_pins)
    base = pins.image("base")
    record = f"{base.site_packages}/mori/_build_requires.txt"
    code, used = engine.run(str(built["tag"]), ["cat", record])
    assert code == 0, used
    versions = dict(line.split("==") for line in used.split())
    lock = require_python_lock(lock_path_for(locked_pins))
    build = {p.name: p.version for p in lock.group(BUILD_GROUP)}
    assert {canonicalize_name(name) for name in versions} <= set(build)  # every one of them is locked
    for name, version in versions.items():
        assert build[canonicalize_name(name)] == version, (name, version)
    assert {"setuptools-scm", "ninja", "cmake", "pybind11", "cython"} <= {
        canonicalize_name(n) for n in versions
    }


def test_sbom_and_provenance_describe_the_built_image(
    built: dict[str, object], locked_pins: Path, engine: DockerEngine
) -> None:
    sbom_text = Path(str(built["sbom"])).read_text()
    validate_sbom(sbom_text)
    sbom = json.loads(sbom_text)
    provenance = json.loads(Path(str(built["provenance"])).read_text())
    info = engine.inspect_image(str(built["tag"]))
    # The labels name the documents: the SBOM's kind and arch, and the digest of the build inputs; the
    # file name adds the image's identity.
    assert info.labels["io.imagebuild.sbom"] == "gfx942.sbom.cdx.json"
    assert Path(str(built["sbom"])).name == f"gfx942-{info.id.removeprefix('sha256:')[:12]}.sbom.cdx.json"
    digest = info.labels["io.imagebuild.inputs-digest"]
    properties = {p["name"]: p["value"] for p in sbom["metadata"]["component"]["properties"]}
    assert properties["imagebuild:inputs-digest"] == digest
    files = {
        d["name"]: d.get("digest") for d in provenance["predicate"]["buildDefinition"]["resolvedDependencies"]
    }
    assert files["build-context.tar"] == {"sha256": digest.removeprefix("sha256:")}
    # The provenance's subject is the image itself.
    assert provenance["subject"][0]["digest"] == {"sha256": info.id.removeprefix("sha256:")}
    assert sbom["metadata"]["component"]["version"] == info.id
    components = {c["bom-ref"]: c for c in sbom["components"]}
    for pin in gfx942_pins(locked_pins):
        assert components[f"pin:{pin.name}"]["version"] in (pin.identity, getattr(pin, "version", None))
        assert f"pin:{pin.name}" in files
    installed = {
        c["name"]
        for c in sbom["components"]
        if {"name": "imagebuild:installed", "value": "true"} in c.get("properties", [])
    }
    # Read from the image: step 4's tools, the pinned flydsl, MoRI built from its git source.
    assert {"tqdm", "prettytable", "meson", "flydsl", "amd-mori"} <= installed
    # The OS layer: every package the image's own /app/apt-packages.txt lists, by its deb purl.
    code, listed = engine.run(str(built["tag"]), ["cat", "/app/apt-packages.txt"], network_mode="none")
    assert code == 0
    debs = {(c["name"], c["version"]) for c in sbom["components"] if str(c.get("purl", "")).startswith("pkg:deb/")}
    # NAME[:ARCH]=VERSION, as dpkg-query lists them (imagebuild-check record-packages)
    rows = [line.partition("=") for line in listed.splitlines() if line.strip()]
    assert len(rows) > 100
    assert {(name.split(":")[0], version) for name, _, version in rows} <= debs
    assert components["os"]["type"] == "operating-system"


def test_verify_passes_on_the_built_image(
    built: dict[str, object], locked_pins: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CI's use of verify: every smoke check, the launcher's in-image dry run included."""
    junit = tmp_path / "junit.xml"
    assert main(["verify", str(built["tag"]), "--pins", str(locked_pins), "--junit", str(junit)]) == 0
    out = capsys.readouterr().out
    assert "PASSED" in out
    assert "launcher 3/3" in out
    assert junit.read_text().count("<testcase") >= 60


def uncommented_example(path: Path) -> str:
    """The checks file init writes, its commented example entries switched on."""
    head, marker, tail = path.read_text(encoding="utf-8").partition("schema_version = 1\n")
    assert marker, path
    return head + marker + "".join(line[2:] + "\n" if line.startswith("# ") else line + "\n" for line in tail.splitlines())


def test_the_projects_own_checks_run_with_the_built_in_ones(
    built: dict[str, object], locked_pins: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """checks.toml's example holds on the built image; a failing check of the team's is reported by its name."""
    checks = tmp_path / "checks.toml"
    wrong = '\n[[command_tests]]\nname = "torch arch"\ncommand = "echo $PYTORCH_ROCM_ARCH"\nexpected_output = ["^gfx950$"]\n'
    checks.write_text(uncommented_example(REPO / "checks.toml") + wrong, encoding="utf-8")
    junit = tmp_path / "junit.xml"
    argv = ["verify", str(built["tag"]), "--pins", str(locked_pins), "--checks", str(checks), "--junit", str(junit)]
    assert main([*argv, "-k", "custom or entrypoint"]) == ExitCode.VERIFY_FAILED
    out = capsys.readouterr().out
    assert "FAILED custom: test_command[torch arch]" in out
    assert "found:    gfx942" in out
    cases = {(c.get("classname"), c.get("name")): c.find("failure") is not None for c in ET.parse(junit).iter("testcase")}
    own = {name for (module, name) in cases if module == "test_custom"}
    assert own == {
        "test_command[vllm imports]", "test_command[torch arch]", "test_file[no ssh keys baked in]",
        "test_file[launcher is executable]", "test_file_content[pip constraint caps setuptools]",
        "test_metadata[workdir]", "test_metadata[entrypoint]", "test_metadata[env PYTORCH_ROCM_ARCH]",
        "test_metadata[label io.imagebuild.pin.vllm]",
    }  # fmt: skip
    assert [key for key, failed in cases.items() if failed] == [("test_custom", "test_command[torch arch]")]
    assert ("test_config", "test_entrypoint_empty") in cases  # -k picks built-in checks by name too
    assert len(cases) == len(own) + 1


def test_second_build_is_fully_cached(built: dict[str, object], locked_pins: Path, tmp_path: Path) -> None:
    record = tmp_path / "again.json"
    assert build(locked_pins, record, "--tag", str(built["tag"])) == 0
    again = json.loads(record.read_text())
    assert again["all_cached"], [s for s in again["steps"] if not s["cached"]]
    if again["labels"] == built["labels"]:  # a working tree edited in between changes the revision label
        assert again["image_id"] == built["image_id"]


def test_normalising_ahead_of_the_build_s_end_gives_the_same_image(
    built: dict[str, object],
    locked_pins: Path,
    tmp_path: Path,
    engine: DockerEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cold build whose intermediate images are normalised while later steps build (every step that
    adds a megabyte, a core taken as idle whatever this machine's load): the identity of the session's
    build, normalised after it, and no image of the rounds left behind."""
    monkeypatch.setattr(ahead_module, "idle_cores", lambda: 2.0)
    tag, record = f"imagebuild-test/ahead:gfx942-{CHECKOUT}", tmp_path / "ahead.json"
    before = engine.image_ids()
    try:
        assert build(locked_pins, record, "--tag", tag, "--no-cache", "--normalize-ahead", "1") == 0
        result = json.loads(record.read_text())
        assert result["labels"] == built["labels"]  # the same inputs, checkout and revision
        assert result["image_id"] == built["image_id"]
        ahead = result["normalization"]["ahead"]
        assert ahead["prefixes"] >= 2, ahead  # MoRI's step and the router's each add more than a MB
        assert ahead["stopped"] == ""
        assert result["normalization"]["layers_reused"] >= ahead["layers"]
        # What is new is the built image with its parents (the layer cache) and the image: no round's
        left = engine.image_ids() - before - {result["image_id"]} - _with_parents(f"{tag}-cache")
        assert not left, [engine.inspect_image(i).history[:1] for i in left]
    finally:
        remove_images(tag)


def _with_parents(name: str) -> set[str]:
    api = docker.from_env().api
    chain, image = set(), api.inspect_image(name)
    while True:
        chain.add(image["Id"])
        if not image.get("Parent"):
            return chain
        image = api.inspect_image(image["Parent"])


def test_failing_step_is_named_and_nothing_tagged(
    built: dict[str, object],
    locked_pins: Path,
    tmp_path: Path,
    engine: DockerEngine,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "pins.toml"
    text = locked_pins.read_text()
    commit = load_pins(locked_pins).get("vllm").identity
    assert commit
    # A pin written by hand (no fingerprint: used as it is) naming a commit the repository lacks.
    vllm = text[text.index("[vllm]") :]
    vllm = vllm[: vllm.index("\n[")] if "\n[" in vllm else vllm
    hand_written = re.sub(r'(?m)^fingerprint = "[^"]*"\n', "", vllm.replace(commit, BAD_SHA))
    bad.write_text(text.replace(vllm, hand_written))
    for name in ("pylock.toml", "apt.lock.toml"):  # the locks beside the pins
        shutil.copy(locked_pins.with_name(name), tmp_path / name)
    tag = "imagebuild-test/must-not-exist:bad"
    assert build(bad, tmp_path / "record.json", "--tag", tag) == 4
    err = capsys.readouterr().err
    assert "step 7/18 'vLLM fork, full source compile' failed" in err
    assert f"vllm = {BAD_SHA}" in err
    assert "nothing was tagged" in err
    assert "full log:" in err
    with pytest.raises(EngineError):
        engine.inspect_image(tag)
    assert not (tmp_path / "record.json").exists()


def test_engine_unreachable(
    locked_pins: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    assert build(locked_pins, tmp_path / "r.json") == 3
    err = capsys.readouterr().err
    assert "connection refused at tcp://127.0.0.1:9: no Docker engine listens there" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("arg", ["GH_TOKEN=abc", "MAX_JOBS=ghp_abcdefghijklmnop"])
def test_secret_like_build_arg_refused(
    locked_pins: Path, tmp_path: Path, arg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build(locked_pins, tmp_path / "r.json", "--build-arg", arg) == 2
    assert "refused" in capsys.readouterr().err

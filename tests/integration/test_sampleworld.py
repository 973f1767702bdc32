"""The sample world itself: each stand-in answers like what it replaces, and the world can fail."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import requests

import docker
from sampleworld import World
from sampleworld.donor_image import mi355x_image
from sampleworld.gitrepos import build_repos
from sampleworld.index_server import JSON_TYPE, start_index_server
from sampleworld.oci_image import OCI_INDEX
from sampleworld.registry import MANIFEST_TYPES
from sampleworld.wheels import STAND_IN_WHEELS, build_stand_in
from sampleworld.world import GIT_PINS

PINS = tomllib.loads((Path(__file__).resolve().parents[2] / "sampleworld" / "pins.toml").read_text())


def live_pins(world: World) -> dict[str, Any]:
    """The pins the running world serves (its ports may differ from sampleworld/pins.toml's)."""
    return tomllib.loads(world.pins_path.read_text())


def manifest(world: World, image: str) -> dict[str, object]:
    name, tag = image.removeprefix(f"{world.registry}/").rsplit(":", 1)
    response = requests.get(
        f"http://{world.registry}/v2/{name}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}, timeout=10
    )
    assert response.status_code == 200, response.text
    data: dict[str, object] = response.json()
    return data


def ls_remote(url: str) -> dict[str, str]:
    out = subprocess.run(["git", "ls-remote", url], capture_output=True, text=True, check=True, timeout=30)
    return {ref: sha for sha, ref in (line.split("\t") for line in out.stdout.splitlines())}


def run_in_base(world: World, script: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """bash -c script in a throwaway container of the base image, on the host network (loopback)."""
    client = docker.from_env()
    container = client.containers.run(
        world.base_image, ["bash", "-c", script], environment=env or {}, network_mode="host", detach=True
    )
    try:
        code = int(container.wait(timeout=600)["StatusCode"])
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
        client.close()


@pytest.mark.docker
@pytest.mark.parametrize("which", ["base_image", "donor_image"])
def test_registry_serves_both_images(sample_world: World, which: str) -> None:
    image = getattr(sample_world, which)
    data = manifest(sample_world, image)
    assert data["schemaVersion"] == 2
    config = data["config"]
    assert isinstance(config, dict)
    assert str(config["digest"]).startswith("sha256:")
    assert data["layers"]


@pytest.mark.docker
def test_registry_serves_the_mi355x_donor_as_an_index_by_its_pinned_digest(sample_world: World) -> None:
    """As the real one: the pin names the index; lock must pick linux/amd64 out of it (an attestation
    manifest for platform unknown/unknown sits beside it, as a buildx push leaves one)."""
    pins = live_pins(sample_world)
    name, tag = sample_world.donor_mi355x_image.removeprefix(f"{sample_world.registry}/").rsplit(":", 1)
    assert pins["donor_mi355x"]["image"] == f"{sample_world.registry}/{name}"
    assert (name, tag) == ("vllm/vllm-openai-rocm", pins["donor_mi355x"]["tag"])
    url = f"http://{sample_world.registry}/v2/{name}/manifests/{tag}"
    response = requests.get(url, headers={"Accept": MANIFEST_TYPES}, timeout=10)
    assert response.status_code == 200, response.text
    assert "sha256:" + hashlib.sha256(response.content).hexdigest() == pins["donor_mi355x"]["digest"]
    index = response.json()
    assert index["mediaType"] == OCI_INDEX
    platforms = [(m["platform"]["os"], m["platform"]["architecture"]) for m in index["manifests"]]
    assert platforms == [("linux", "amd64"), ("unknown", "unknown")]


@pytest.mark.docker
def test_git_daemon_serves_the_pinned_refs(sample_world: World) -> None:
    pins = live_pins(sample_world)
    mori = ls_remote(pins["mori"]["url"])
    assert mori["refs/tags/v1.2.2^{}"] == pins["mori"]["commit"]
    assert "refs/tags/v1.2.1^{}" in mori
    assert mori["refs/tags/v1.2.2"] != pins["mori"]["commit"]  # annotated: the tag object is not the commit
    vllm = ls_remote(pins["vllm"]["url"])
    assert vllm[f"refs/heads/{pins['vllm']['branch']}"] == pins["vllm"]["commit"]
    assert vllm["refs/heads/main"] != pins["vllm"]["commit"]
    router = ls_remote(pins["router"]["url"])
    assert router[f"refs/heads/{pins['router']['branch']}"] == pins["router"]["commit"]
    assert "HEAD" in router
    for refs in (mori, vllm, router):
        assert sample_world.bad_sha not in refs.values()
    assert ls_remote(sample_world.repo_url("ROCm/mori-3rdparty.git"))["refs/heads/main"]


@pytest.mark.docker
def test_world_matches_its_pins_file(sample_world: World) -> None:
    pins = live_pins(sample_world)
    # An empty commit (deepep follows its branch) is lock's to fill; every other pin names the world's commit.
    pinned = {name: pins[name]["commit"] for name in GIT_PINS if pins[name]["commit"]}
    assert {name: sample_world.commits[name] for name in pinned} == pinned
    assert set(sample_world.commits) == set(GIT_PINS)
    assert sample_world.wheel_sha256[pins["flydsl"]["filename"]] == pins["flydsl"]["sha256"]
    assert pins["aiter"]["url"] == sample_world.aiter_url
    assert pins["base"]["image"] == sample_world.base_image.rsplit(":", 1)[0]
    assert pins["donor"]["image"] == sample_world.donor_image.rsplit(":", 1)[0]


@pytest.mark.docker
def test_blobless_clone_checks_out_the_pinned_commit(sample_world: World, tmp_path: Path) -> None:
    pins = live_pins(sample_world)
    url, commit = pins["router"]["url"], pins["router"]["commit"]
    subprocess.run(
        ["git", "clone", "-q", "--filter=blob:none", url, str(tmp_path / "r")], check=True, timeout=60
    )
    subprocess.run(["git", "-C", str(tmp_path / "r"), "checkout", "-q", commit], check=True, timeout=60)
    assert "moriio" in (tmp_path / "r" / "src" / "main.rs").read_text()
    missing = subprocess.run(
        ["git", "-C", str(tmp_path / "r"), "fetch", "-q", "origin", sample_world.bad_sha],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert missing.returncode != 0


@pytest.mark.docker
def test_index_serves_pep691_json_and_pep503_html(sample_world: World) -> None:
    pins = live_pins(sample_world)
    listing = requests.get(sample_world.simple_url, headers={"Accept": JSON_TYPE}, timeout=10)
    assert listing.headers["Content-Type"] == JSON_TYPE
    projects = {p["name"] for p in listing.json()["projects"]}
    assert {"setuptools", "flydsl", "amd-aiter", "pip", "pybind11-global", "meson"} <= projects
    flydsl = requests.get(
        f"{sample_world.simple_url}flydsl/", headers={"Accept": JSON_TYPE}, timeout=10
    ).json()
    files = {f["filename"]: f for f in flydsl["files"]}
    wanted = files[pins["flydsl"]["filename"]]
    assert wanted["hashes"]["sha256"] == pins["flydsl"]["sha256"]
    body = requests.get(sample_world.index_url + wanted["url"], timeout=10).content
    assert hashlib.sha256(body).hexdigest() == pins["flydsl"]["sha256"]
    html = requests.get(f"{sample_world.simple_url}setuptools/", headers={"Accept": "text/html"}, timeout=10)
    assert html.headers["Content-Type"].startswith("application/vnd.pypi.simple.v1+html")
    assert "setuptools-79.0.1-py3-none-any.whl#sha256=" in html.text
    assert "setuptools-80.9.0-py3-none-any.whl#sha256=" in html.text
    aiter = requests.get(sample_world.aiter_url, timeout=10)
    assert aiter.status_code == 200
    assert aiter.content[:2] == b"PK"


def test_index_server_runs_in_a_thread_on_any_port(tmp_path: Path) -> None:
    (tmp_path / "packages").mkdir()
    (tmp_path / "packages" / "Demo_Pkg-1.0.tar.gz").write_bytes(b"sdist")
    with start_index_server(tmp_path) as index:
        assert index.port != 0
        page = requests.get(f"{index.simple_url}demo-pkg/", timeout=10).text
        assert f"Demo_Pkg-1.0.tar.gz#sha256={hashlib.sha256(b'sdist').hexdigest()}" in page
        assert requests.get(f"{index.simple_url}nothing/", timeout=10).status_code == 404
        assert requests.get(f"{index.url}/files/../../etc/passwd", timeout=10).status_code == 404


@pytest.mark.docker
def test_mori_isolated_build_fails_on_setuptools_80_and_holds_with_the_constraint(
    sample_world: World,
) -> None:
    """The world can fail: unconstrained, pip's isolated build takes setuptools 80.9.0 from the index."""
    pins = live_pins(sample_world)
    spec = f"git+{pins['mori']['url']}@{pins['mori']['commit']}"
    code, out = run_in_base(sample_world, f"pip install '{spec}'", {"BUILD_UMBP": "OFF"})
    assert code != 0
    assert "AssertionError: run() must precede build_extension()" in out
    assert "built with setuptools 80.9.0" in out
    script = (
        "echo 'setuptools<80' > /tmp/constraints.txt && "
        f"PIP_CONSTRAINT=/tmp/constraints.txt pip install '{spec}' && "
        "cd / && python3 -c 'import mori, mori.io, mori.ops; print(mori.__version__)' && "
        "ls /root/.mori/jit/*.hsaco.lock && ls -d /tmp/mori_jit_*"
    )
    code, out = run_in_base(sample_world, script, {"BUILD_UMBP": "OFF"})
    assert code == 0, out[-3000:]
    assert "1.2.2" in out


def test_stand_ins_are_deterministic_and_match_the_pins_file(tmp_path: Path) -> None:
    """No Docker needed: rebuilding the repositories and wheels gives the SHAs pins.toml records."""
    refs = build_repos(tmp_path / "git")
    assert refs == build_repos(tmp_path / "again")
    for name, (repo, ref) in GIT_PINS.items():
        if PINS[name].get("branch") and not PINS[name]["commit"]:
            continue  # lock resolves the branch; the repository's determinism is checked above
        assert refs[repo][ref] == PINS[name]["commit"], f"update [{name}] commit in sampleworld/pins.toml"
    flydsl = next(w for w in STAND_IN_WHEELS if w.filename == PINS["flydsl"]["filename"])
    (tmp_path / "w1").mkdir()
    first = build_stand_in(flydsl, tmp_path / "w1")
    (tmp_path / "w2").mkdir()
    second = build_stand_in(flydsl, tmp_path / "w2")
    assert first.read_bytes() == second.read_bytes()
    assert hashlib.sha256(first.read_bytes()).hexdigest() == PINS["flydsl"]["sha256"]
    donor = mi355x_image()
    assert donor == mi355x_image()
    assert donor.digest == PINS["donor_mi355x"]["digest"], (
        "update [donor_mi355x] digest in sampleworld/pins.toml"
    )


def test_mi355x_donor_holds_trees_built_for_gfx942_and_gfx950_and_its_own_flydsl() -> None:
    """The MI300X donor's trees (the real one is "this same image plus three vLLM .py files") with
    the gfx950 kernels; flydsl 0.2.2 without a dist-info, which gfx950 keeps (no re-pin)."""
    with tarfile.open(fileobj=io.BytesIO(mi355x_image().blobs[0])) as layer:
        site = PINS["donor_mi355x"]["site_packages"].lstrip("/")
        files = {m.name.removeprefix(f"{site}/"): m for m in layer.getmembers() if m.isfile()}
        assert {n.split("/")[2] for n in files if n.startswith("aiter_meta/hsaco/")} == {"gfx942", "gfx950"}
        grafted = {"aiter_meta/configs/kimik3_a8w4_tuned_fmoe.csv", "aiter/ops/triton/conv/__init__.py"}
        assert grafted <= set(files)
        flydsl = layer.extractfile(files["flydsl/__init__.py"])
        assert flydsl is not None
        assert b'__version__ = "0.2.2"' in flydsl.read()
        assert not [n for n in files if ".dist-info/" in n]
        assert {(m.uid, m.gid, m.mtime) for m in layer.getmembers()} == {(0, 0, 1767225600)}


@pytest.mark.parametrize(
    ("arch", "refused"),
    [("gfx942", False), ("gfx950", False), ("gfx90a;gfx942;gfx950", True), ("gfx90a", True), ("", True)],
)
def test_sample_vllm_compiles_for_one_k3_arch_and_refuses_the_bases_three(
    tmp_path: Path, arch: str, refused: bool
) -> None:
    """The base's ENV PYTORCH_ROCM_ARCH shadows an ARG of that name: vLLM sees the three archs."""
    source = tmp_path / "vllm"
    shutil.copytree(Path(__file__).resolve().parents[2] / "sampleworld" / "sources" / "vllm", source)
    env = {
        "PATH": os.environ["PATH"],
        "MAX_JOBS": "2",
        "PYTORCH_ROCM_ARCH": arch,
        "VLLM_TARGET_DEVICE": "rocm",
    }
    done = subprocess.run(
        [sys.executable, "setup.py", "--name"],
        check=False,
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if refused:
        assert done.returncode != 0
        assert (
            f"RuntimeError: vLLM would compile for {arch} (sample vLLM: this image must target exactly one of gfx942, gfx950)"
            in done.stderr
        )
    else:
        assert (done.returncode, done.stdout.strip()) == (0, "vllm"), done.stderr

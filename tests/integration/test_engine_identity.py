"""One image identity on every Docker engine of the matrix: 20.10 and 26 (graph driver), 26 and Debian
testing's 28 (containerd store).

The sample image is built once per engine (the main engine's is the session's shared build); the
identity is the normalised config's digest, which each build record, iidfile and tag must agree on.
Then each engine's export (read from its own store, never from docker save) is imported on every
other engine (the image removed there first, so the load is real), and a digest published from one
engine is pulled on another.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.normalize.after_build import layer_plan, previous_layers
from imagebuild.normalize.core import normalize_image
from imagebuild.project import find_project
from imagebuild.render import RenderOptions, render_inputs
from sampleworld import engine_matrix
from sampleworld.engine_matrix import MatrixEngine
from sampleworld.pytest_plugin import sample_world_state_dir
from sampleworld.world import World
from tests import REPO
from tests.integration.engine_support import engine_at
from tests.integration.image_support import CHECKOUT
from tests.integration.scratch import module_scratch

pytestmark = pytest.mark.docker

TAG = f"imagebuild-test/engines:gfx942-{CHECKOUT}"


def start_build(engine: MatrixEngine, pins: Path, where: Path) -> subprocess.Popen[bytes]:
    """`imagebuild build` against ``engine`` in a process of its own, so the engines build side by side."""
    record, iidfile, log = (where / f"{engine.name}.{kind}" for kind in ("build.json", "iid", "log"))
    argv = [sys.executable, "-m", "imagebuild", "build", "--pins", str(pins), "--network", "host", "--tag", TAG]
    env = {**os.environ, "DOCKER_HOST": engine.docker_host}
    with log.open("wb") as out:
        return subprocess.Popen(
            [*argv, "--record", str(record), "--iidfile", str(iidfile)], cwd=REPO, env=env, stdout=out, stderr=out
        )


def finish_build(engine: MatrixEngine, build: subprocess.Popen[bytes], where: Path) -> dict[str, object]:
    code = build.wait(timeout=1800)
    log = (where / f"{engine.name}.log").read_text(errors="replace")
    assert code == 0, f"build on {engine.name} exited {code}:\n{log[-3000:]}"
    result: dict[str, object] = json.loads((where / f"{engine.name}.build.json").read_text())
    # --iidfile holds the identity, not the engine's ID
    assert (where / f"{engine.name}.iid").read_text() == result["image_id"]
    return result


@pytest.fixture(scope="module")
def builds(
    docker_engine_matrix: list[MatrixEngine],
    locked_pins: Path,
    sample_image: dict[str, object],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, dict[str, object]]]:
    """Each engine's build record; the main engine's is the session's shared sample image.

    The other engines build at the same time: a cold build leaves a core idle for much of its time
    (pulls, single-threaded pip and normalisation), and the builds share nothing but the sample world.
    At the module's end the other engines are emptied: no later test reads what they built, and
    kept, they stayed to the Podman tests (the matrix's last users), at the docker tier's disk peak.
    """
    where = tmp_path_factory.mktemp("engines")
    others = [engine for engine in docker_engine_matrix if engine.name != "main"]
    running = [(engine, start_build(engine, locked_pins, where)) for engine in others]
    try:
        records = {"main": sample_image}
        for engine, build in running:
            records[engine.name] = finish_build(engine, build, where)
    finally:
        for _, build in running:
            if build.poll() is None:
                build.kill()
                build.wait()
    yield records
    engine_matrix.empty(sample_world_state_dir())


def engine_named(matrix: list[MatrixEngine], name: str) -> MatrixEngine:
    return next(e for e in matrix if e.name == name)


def test_docker_20_and_26_give_one_identity(builds: dict[str, dict[str, object]]) -> None:
    assert builds["docker26-overlay2"]["image_id"] == builds["main"]["image_id"]
    for name in ("main", "docker26-overlay2"):  # the fast path: no docker save on a local overlay2 engine
        normalization = builds[name]["normalization"]
        assert isinstance(normalization, dict)
        assert normalization["read_from"] == "layer store"
        assert normalization["engine_id"] == builds[name]["image_id"]


CONTAINERD_STORES = ("docker26-containerd", "forky-containerd")


@pytest.mark.parametrize("name", CONTAINERD_STORES)
def test_the_containerd_store_knows_the_image_by_the_manifest_imagebuild_loaded(
    builds: dict[str, dict[str, object]], docker_engine_matrix: list[MatrixEngine], name: str
) -> None:
    record = builds[name]
    normalization = record["normalization"]
    assert isinstance(normalization, dict)
    assert "containerd image store" in normalization["engine"]
    # read from its content store's blobs, not from docker save
    assert (normalization["read_from"], normalization["fallback_reason"]) == ("content store", "")
    assert normalization["engine_id"] != record["image_id"]  # a manifest digest there, not the config's
    with engine_at(engine_named(docker_engine_matrix, name).docker_host) as engine:
        assert engine.inspect_image(TAG).id == normalization["engine_id"]  # the tag names what was loaded
        assert engine.inspect_image(TAG).layers == engine.inspect_image(str(normalization["engine_id"])).layers


def test_a_cached_rebuild_on_the_containerd_store_gives_the_same_identity(
    builds: dict[str, dict[str, object]],
    docker_engine_matrix: list[MatrixEngine],
    locked_pins: Path,
    tmp_path: Path,
) -> None:
    engine = engine_named(docker_engine_matrix, "docker26-containerd")
    again = finish_build(engine, start_build(engine, locked_pins, tmp_path), tmp_path)
    assert again["image_id"] == builds["docker26-containerd"]["image_id"]


def test_a_rebuild_on_the_containerd_store_takes_its_unchanged_layers_from_the_content_store(
    builds: dict[str, dict[str, object]],
    docker_engine_matrix: list[MatrixEngine],
    locked_pins: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The built image normalised again with its record's notes, as a rebuild that changed nothing below
    its last layer would be: every build layer is the one the engine holds, nothing is saved or sent."""
    record = builds["docker26-containerd"]
    normalization = record["normalization"]
    assert isinstance(normalization, dict)
    record_path = tmp_path / "record.json"
    record_path.write_text(json.dumps(record))
    inputs = find_project(REPO, locked_pins).load("gfx942")
    monkeypatch.setattr(DockerEngine, "save", _no_save)
    with engine_at(engine_named(docker_engine_matrix, "docker26-containerd").docker_host) as engine:
        built = str(normalization["unnormalized_id"])
        plan = layer_plan(engine, built, inputs.pins.image(inputs.definition.base_pin).reference, render_inputs(inputs, RenderOptions()))
        result = normalize_image(engine, built, replace(plan, previous=previous_layers(record_path)), tmp_path)
    assert (result.image_id, result.engine_id, result.read_from) == (record["image_id"], normalization["engine_id"], "content store")
    assert (result.layers_rewritten, result.layers_reused) == (0, normalization["layers_rewritten"])


def _no_save(self: DockerEngine, image_id: str) -> Iterator[bytes]:
    """DockerEngine.save, failing once read (as the real one, nothing runs before the first chunk is asked)."""
    msg = f"docker save of {image_id[:19]} was read: the engine's store should have been"
    raise AssertionError(msg)
    yield b""  # a generator: export makes the save stream before it knows whether it will read it


def test_a_cache_over_the_normalised_layers_where_the_store_allows_it(
    builds: dict[str, dict[str, object]], docker_engine_matrix: list[MatrixEngine], locked_pins: Path, tmp_path: Path
) -> None:
    """build --cache-normalized on the other engines (the main engine's: test_locked_installs): on a
    graph-driver store TAG-cache becomes a config over the image's own layers; on the containerd store,
    whose classic builder fails a step restored from such an image, the built image stays TAG-cache.
    The image is the one every engine gives."""
    tag = f"imagebuild-test/engines-cache:gfx942-{CHECKOUT}"
    for engine in (e for e in docker_engine_matrix if e.name != "main"):
        record = tmp_path / f"{engine.name}.json"
        argv = [sys.executable, "-m", "imagebuild", "build", "--pins", str(locked_pins), "--network", "host"]
        argv += ["--tag", tag, "--record", str(record), "--cache-normalized"]
        done = subprocess.run(argv, cwd=REPO, env={**os.environ, **engine.env}, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(record.read_text())
        normalization = result["normalization"]
        assert result["image_id"] == builds["main"]["image_id"]
        with engine_at(engine.docker_host) as client:
            try:
                cache = client.inspect_image(f"{tag}-cache")
                if engine.kind == "containerd":
                    assert (cache.id, normalization["cache_image"]) == (normalization["unnormalized_id"], "")
                    assert "the built image is kept as" in done.stderr + done.stdout
                else:
                    assert (cache.id, cache.layers) == (normalization["cache_image"], client.inspect_image(tag).layers)
            finally:
                for name in (tag, f"{tag}-cache"):
                    client.remove_image(name)


def test_the_containerd_stores_give_the_graph_driver_identity(builds: dict[str, dict[str, object]]) -> None:
    assert {builds[name]["image_id"] for name in CONTAINERD_STORES} == {builds["main"]["image_id"]}


@pytest.mark.parametrize("name", ["docker26-overlay2", *CONTAINERD_STORES])
def test_verify_passes_on_the_engine_that_built_it(
    builds: dict[str, dict[str, object]], docker_engine_matrix: list[MatrixEngine], locked_pins: Path, name: str
) -> None:
    assert builds[name]["image_id"]
    with engine_at(engine_named(docker_engine_matrix, name).docker_host), contextlib.chdir(REPO), pytest.MonkeyPatch.context() as patch:
        patch.setattr(DockerEngine, "save", _no_save)  # its layer scan reads the engine's store
        assert main(["verify", TAG, "--pins", str(locked_pins)]) == 0


ENGINES = ("main", "docker26-overlay2", *CONTAINERD_STORES)


@pytest.fixture(scope="module")
def exports(
    builds: dict[str, dict[str, object]],
    docker_engine_matrix: list[MatrixEngine],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, dict[str, object]]]:
    """Each engine's export of the image it built (zstd, the default): its manifest, read back. Every
    engine of the matrix is local, so each exports from its own store, never from docker save."""
    manifests: dict[str, dict[str, object]] = {}
    with module_scratch(request, tmp_path_factory, "exports") as exported:
        for name in ENGINES:
            output = exported / name
            output.mkdir()
            with engine_at(engine_named(docker_engine_matrix, name).docker_host), contextlib.chdir(REPO), pytest.MonkeyPatch.context() as patch:
                patch.setattr(DockerEngine, "save", _no_save)
                assert main(["export", str(builds[name]["tag"]), "-o", str(output)]) == 0
            (path,) = output.glob("*.json")
            manifests[name] = {**json.loads(path.read_text()), "path": str(path)}
        yield manifests


def evict(engine: MatrixEngine, image: str) -> list[str]:
    """Remove ``image`` from the engine so an import must load it; returns its tags, to put back."""
    inspected = subprocess.run(
        ["docker", "-H", engine.docker_host, "image", "inspect", "--format", "{{json .RepoTags}}", image],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if inspected.returncode != 0:
        return []
    tags: list[str] = json.loads(inspected.stdout) or []
    subprocess.run(["docker", "-H", engine.docker_host, "image", "rm", "--force", image], capture_output=True, check=True)
    return tags


def test_every_engine_exports_the_same_identity(exports: dict[str, dict[str, object]], builds: dict[str, dict[str, object]]) -> None:
    assert {str(m["image_id"]) for m in exports.values()} == {str(builds["main"]["image_id"])}
    identity12 = str(builds["main"]["image_id"])[7:19]
    assert all(str(m["archive"]).endswith(f"-{identity12}.tar.zst") for m in exports.values())  # named by the identity
    # The containerd store's manifest travels with its archive: a node on that store names it the same.
    for name in CONTAINERD_STORES:
        assert exports[name]["manifest_digest"] == builds[name]["normalization"]["engine_id"]  # type: ignore[index]


@pytest.mark.parametrize(("source", "target"), [(a, b) for a in ENGINES for b in ENGINES if a != b])
def test_an_archive_exported_on_one_engine_imports_verified_on_every_other(
    exports: dict[str, dict[str, object]],
    docker_engine_matrix: list[MatrixEngine],
    capsys: pytest.CaptureFixture[str],
    source: str,
    target: str,
) -> None:
    """On the main engine (20.10, no zstd load) with the shipped importer, as a node without imagebuild."""
    manifest, node = exports[source], engine_named(docker_engine_matrix, target)
    identity = str(manifest["image_id"])
    expected = str(manifest["manifest_digest"]) if node.kind == "containerd" else identity
    tags = evict(node, expected)
    capsys.readouterr()
    if target == "main":
        importer = Path(str(manifest["path"])).parent / "imagebuild-import.pyz"
        run = subprocess.run(
            [sys.executable, str(importer), str(manifest["path"])], env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": node.docker_host},
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == expected
        assert "verified and loaded" in run.stderr
        said = run.stderr
    else:
        with engine_at(node.docker_host), contextlib.chdir(REPO):
            assert main(["import", str(manifest["path"]), "--json"]) == 0
        captured = capsys.readouterr()
        document, said = json.loads(captured.out), captured.err
        assert (document["image_id"], document["engine_id"], document["already_present"]) == (identity, expected, False)
    assert "free space not checked" not in said, said  # the engine's room was, before the load
    # A graph-driver node holds the sample base (it built the image): those layers' files are not sent.
    assert ("layers are in the engine already: read and hashed, not sent" in said) == (node.kind != "containerd"), said
    with engine_at(node.docker_host) as engine:
        loaded = engine.inspect_image(expected)
        assert (loaded.id, loaded.identity) == (expected, identity)
        assert set(manifest["repo_tags"]) <= set(loaded.tags)  # tagged after the check
        for name in tags:
            engine.tag(expected, name)


@pytest.mark.parametrize(
    ("source", "target"),
    [("docker26-containerd", "main"), ("main", "docker26-containerd"), ("forky-containerd", "docker26-overlay2"), ("main", "forky-containerd")],
)
def test_a_digest_published_from_one_engine_pulls_as_the_same_image_on_another(
    *,
    builds: dict[str, dict[str, object]],
    docker_engine_matrix: list[MatrixEngine],
    sample_world: World,
    capsys: pytest.CaptureFixture[str],
    source: str,
    target: str,
) -> None:
    repository = f"{sample_world.registry}/imagebuild-test-engines/{source}"
    capsys.readouterr()
    with engine_at(engine_named(docker_engine_matrix, source).docker_host), contextlib.chdir(REPO):
        assert main(["publish", str(builds[source]["tag"]), "-t", repository, "--json"]) == 0
    published = json.loads(capsys.readouterr().out)
    assert published["image_id"] == builds["main"]["image_id"]  # the identity, from either store
    node = engine_named(docker_engine_matrix, target)
    # The image the pull must make: on a graph-driver store by its identity (removed first, so the
    # layers really come from the registry), on the containerd store by the published manifest.
    tags = evict(node, published["digest"] if node.kind == "containerd" else published["image_id"])
    with engine_at(node.docker_host) as engine:
        pulled = engine.inspect_image(engine.pull(published["reference"]))
        for name in tags:
            engine.tag(pulled.id, name)
    assert pulled.identity == published["image_id"]
    assert published["digest"] in (pulled.id, *(r.split("@")[-1] for r in _repo_digests(node, published["reference"])))


def _repo_digests(engine: MatrixEngine, reference: str) -> list[str]:
    out = subprocess.run(
        ["docker", "-H", engine.docker_host, "image", "inspect", "--format", "{{json .RepoDigests}}", reference],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return list(json.loads(out.stdout) or [])

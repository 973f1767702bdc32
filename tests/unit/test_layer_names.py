"""Knowing a saved layer's entry before reading it: checked against Docker 20.10's real `docker save`."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.normalize.core import LayerPlan, normalize_saved
from imagebuild.normalize.layer_names import legacy_layer_dirs
from tests.unit.imagetars import EPOCH, Item, config, digest, layer, saved

# The three lowest layers of a sample-world image and the directories Docker 20.10's save gave them.
DIFF_IDS = [
    "sha256:56839d5a5e2ad128b51407e55461cae45d983fb38a76df6551bde8160d40ec82",
    "sha256:4bd9dcd37ad9621d484b97dbdd058184ba303772921c21df7340e29b10ad7a19",
    "sha256:1a4d1a3efac379cc3a10380ec0714e5868d07fece2d45f7c15db2c2bf4498b09",
]
DIRS = [
    "0cb6a659a1261442c668ec26979187c33b57dd973d50c28f48c2f7417c279e74",
    "350276a15ae64a3661bb7e5f69589768b1a962cf8f916d34fd0f878c5e4dbaea",
    "9d402966d534d10871b850e183c1d4ecda4ccd1a905ad03524d7ca419f03abc0",
]
ZERO_CONFIG = (
    '{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,'
    '"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,"Image":"","Volumes":null,'
    '"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null}'
)
LAYER_1_JSON = (
    f'{{"id":"{DIRS[1]}","parent":"{DIRS[0]}","created":"1970-01-01T00:00:00Z",'
    f'"container_config":{ZERO_CONFIG},"os":"linux"}}'
).encode()


def test_chain_ids_follow_the_oci_definition() -> None:
    chains = chain_ids(DIFF_IDS[:2])
    assert chains[0] == DIFF_IDS[0]
    assert chains[1] != DIFF_IDS[1]
    assert chains[1].startswith("sha256:")


def test_legacy_directories_are_computed_as_docker_names_them() -> None:
    dirs = legacy_layer_dirs(DIFF_IDS, {f"{DIRS[1]}/json": LAYER_1_JSON})
    assert [dirs.get(d) for d in DIRS] == [0, 1, 2]


def test_nothing_is_guessed_without_a_template_or_when_it_does_not_check_out() -> None:
    assert legacy_layer_dirs(DIFF_IDS, {}) == {}
    top = b'{"id":"x","config":{},"created":"2026-01-01T00:00:00Z"}'
    assert legacy_layer_dirs(DIFF_IDS, {"x/json": top}) == {}  # the top layer's json is no template
    assert legacy_layer_dirs(DIFF_IDS, {f"{'f' * 64}/json": LAYER_1_JSON}) == {}  # its own dir must match


def test_base_layers_known_by_name_are_not_spooled(tmp_path: Path) -> None:
    """OCI layout: blobs are named by digest, so the base layer passes by unread (a corrupt copy would fail)."""
    base = [layer([Item("etc/os-release", data=b"base\n")])]
    built = [layer([Item("app/v.txt", data=b"1\n")])]
    layers = base + built
    archive = saved(layers, config(layers), oci=True)
    corrupt = archive.replace(b"base\n", b"BASE\n")  # the base layer's bytes no longer match its digest
    plan = LayerPlan(
        layers=tuple(digest(d) for d in layers), base_layers=1, base_history=2, epochs=(EPOCH,), created=EPOCH
    )
    result = normalize_saved(io.BytesIO(corrupt), plan, tmp_path, what="x")
    assert result.diff_ids[0] == digest(base[0])
    assert (
        result.spool_peak < 2 * len(built[0]) + 2 * tarfile.RECORDSIZE
    )  # the build's layer, raw and rewritten

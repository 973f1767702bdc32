"""`imagebuild slurm` input checks: one line, exit 2, nothing written, for every kind of bad value."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.importer.manifest import Manifest

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"127.0.0.1:5000/imagebuild/kimi-k3@{DIGEST}"
BASE = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/kimi-k3"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*BASE, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_prints_the_script_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--image", IMAGE)
    assert code == 0, err
    assert out.startswith("#!/bin/bash\n")
    assert f"IMAGE={IMAGE}\n" in out


def test_writes_an_executable_file_with_o(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "job.sbatch"
    code, out, err = run(capsys, "--image", IMAGE, "-o", str(target))
    assert code == 0, err
    assert out == ""
    assert "sbatch" in err
    assert target.read_text().startswith("#!/bin/bash\n")
    assert target.stat().st_mode & stat.S_IXUSR
    assert [p.name for p in tmp_path.iterdir()] == ["job.sbatch"]  # no temporary file left


BAD = [
    (["--nodes", "3"], "--nodes 3 does not fit recipe kimi-k3 variant pp2xtp8: TP 8 x PP 2 = 16 GPUs"),
    (["--nodes", "0"], "--nodes 0"),
    (["--variant", "pp2xtp9"], "has no variant 'pp2xtp9'"),
    (["--recipe", "kimi-k4"], "unknown recipe 'kimi-k4'"),
    (["--recipe", "../etc/passwd"], "--recipe '../etc/passwd'"),
    (["--model-path", "models/k3"], "--model-path 'models/k3': expected an absolute path"),
    (["--model-path", "/models/k3:rw"], "':' or ','"),
    (["--model-path", "/models/k3\nrm -rf /"], "control character"),
    (["--time", "4h"], "--time '4h'"),
    (["--job-name", "k3; reboot"], "--job-name 'k3; reboot'"),
    (["--partition", "gpu batch"], "--partition 'gpu batch'"),
    (["--serve-port", "70000"], "--serve-port 70000"),
    (["--barrier-timeout", "0"], "--barrier-timeout 0"),
    (["--shm-size", "lots"], "--shm-size 'lots'"),
    (["--ulimit", "nofile=many"], "--ulimit 'nofile=many'"),
    (["--env", "NODE_RANK=1"], "the job sets NODE_RANK itself"),
    (["--env", "BENCHMARK_CMD=x"], "--benchmark-cmd"),
    (["--env", "HF_TOKEN=hf_abc"], "use --pass-env HF_TOKEN"),
    (["--env", "PROXY=https://user:pw@proxy.example/"], "credential-like"),
    (["--env", "NOVALUE"], "expected NAME=VALUE"),
    (["--env", "X=a\tb"], "control character"),
    (["--pass-env", "NOT-A-NAME"], "--pass-env 'NOT-A-NAME'"),
    (["--docker-arg=--rm"], "the script decides --rm"),
    (["--docker-arg=--network=bridge"], "host networking"),
    (["--docker-arg=--name=x"], "named per job and node"),
    (["--sbatch-arg=--account=a b"], "not shell"),
    (["--sbatch-arg=--nodes=4"], "has an option of its own"),
    (["--rdma-lib", "/usr/lib/libibverbs.so.1,x"], "':' or ','"),
    (["--benchmark-cmd", "run\nreboot"], "--benchmark-cmd"),
    (["--benchmark-cmd", "bench --hub https://me:s3cret@hub.example/"], "credential-like"),
    (["--docker-arg=--env=HF_TOKEN=hf_abc"], "'HF_TOKEN=...'"),
    (["--docker-arg=--label=x=ghp_abcdefghijklmnop"], "credential-like"),
    (["--master-port", "8000"], "--master-port 8000: is also --serve-port's"),
    (["--barrier-port", "29500"], "--barrier-port 29500: is also --master-port's"),
    (["--jit-cache", "cache/jit"], "--jit-cache 'cache/jit': expected an absolute path"),
    (["--jit-cache", "/var/tmp/jit:rw"], "':' or ','"),
    (["--jit-cache", "/var/tmp/jit\nx"], "control character"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    target = tmp_path / "job.sbatch"
    code = main([*BASE, "--image", IMAGE, "-o", str(target), *args])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.startswith("imagebuild: error: ")
    assert err.count("\n") == 1, err
    assert message in err
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "image",
    [
        "127.0.0.1:5000/imagebuild/kimi-k3:latest",
        "imagebuild/kimi-k3",
        f"127.0.0.1:5000/Imagebuild/kimi-k3@{DIGEST}",
        "127.0.0.1:5000/imagebuild/kimi-k3@sha256:abc",
        f"127.0.0.1:5000/imagebuild/kimi-k3@{DIGEST} --privileged",
    ],
)
def test_image_must_be_a_digest_reference(capsys: pytest.CaptureFixture[str], image: str) -> None:
    code, out, err = run(capsys, "--image", image)
    assert code == 2
    assert "expected REPOSITORY@sha256:" in err
    assert out == ""


def test_image_and_archive_are_exclusive(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main([*BASE, "--image", IMAGE, "--archive", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert "argument --archive: not allowed with argument --image" in err
    assert len(err.splitlines()) == 1


def _manifest(**changes: object) -> dict[str, object]:
    """A manifest as `imagebuild export` writes it (the importer's own format)."""
    manifest = Manifest(
        archive="kimi-k3-cdcdcdcdcdcd.tar.zst",
        sha256="ef" * 32,
        size=1,
        compression="zstd",
        image_id="sha256:" + "cd" * 32,
        manifest_digest="sha256:" + "ab" * 32,
        uncompressed_size=2,
        repo_tags=("imagebuild/kimi-k3:gfx942",),
        pins={},
        labels={},
        imagebuild_version="0.1.0",
    ).to_json()
    return {**manifest, **changes}


def _export_dir(tmp_path: Path, manifest: object, *, archive: bool = True, importer: bool = True) -> Path:
    path = tmp_path / "kimi-k3-cdcdcdcdcdcd.tar.zst.json"
    path.write_text(json.dumps(manifest) if not isinstance(manifest, str) else manifest)
    if archive:
        (tmp_path / "kimi-k3-cdcdcdcdcdcd.tar.zst").write_bytes(b"x")
    if importer:
        (tmp_path / "imagebuild-import.pyz").write_text("# the shipped importer\n")
    return path


def test_archive_job_runs_the_manifest_image_id(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    manifest = _export_dir(tmp_path, _manifest())
    code, out, err = run(capsys, "--archive", str(manifest))
    assert code == 0, err
    assert f"IMAGE=sha256:{'cd' * 32}\n" in out
    assert f"ARCHIVE_MANIFEST={manifest}\n" in out
    assert f"ARCHIVE_IMPORTER={tmp_path / 'imagebuild-import.pyz'}\n" in out


@pytest.mark.parametrize(
    ("manifest", "missing", "message"),
    [
        ("{not json", "", "not valid JSON"),
        ({k: v for k, v in _manifest().items() if k != "image_id"}, "", "missing key 'image_id'"),
        (_manifest(image_id="sha256:short"), "", "'image_id' must be sha256:"),
        (_manifest(format="something-else"), "", "is not 'imagebuild-image-archive'"),
        (_manifest(), "archive", "the archive"),
        (_manifest(), "importer", "the importer"),
    ],
    ids=["not-json", "no-image-id", "bad-image-id", "other-format", "no-archive", "no-importer"],
)
def test_bad_archive_manifests_are_refused(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    manifest: object,
    missing: str,
    message: str,
) -> None:
    path = _export_dir(tmp_path, manifest, archive=missing != "archive", importer=missing != "importer")
    code, _, err = run(capsys, "--archive", str(path))
    assert code == 2
    assert message in err
    assert err.count("\n") == 1


def test_missing_archive_names_the_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "--archive", str(tmp_path / "nowhere.json"))
    assert code == 2
    assert "nowhere.json: not found" in err


def test_output_in_a_missing_directory_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "--image", IMAGE, "-o", str(tmp_path / "no" / "job.sbatch"))
    assert code == 2
    assert "does not exist" in err


def test_env_values_that_fit_the_recipe_topology_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    """4 nodes of 4 GPUs also make TP 8 x PP 2, when GPUS_PER_NODE says so."""
    code, out, err = run(capsys, "--image", IMAGE, "--env", "GPUS_PER_NODE=4", "--nodes", "4")
    assert code == 0, err
    assert "on 4 nodes (TP 8 x PP 2, 4 GPUs per node)" in out


def test_a_job_has_an_init_a_host_jit_cache_keyed_by_the_image_and_the_nodes_to_itself(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "--image", IMAGE)
    assert code == 0, err
    assert "INIT=1\n" in out
    assert f'JIT_CACHE="/var/tmp/imagebuild-jit-cache-$UID/{DIGEST[7:19]}"\n' in out  # the user's own
    assert "#SBATCH --exclusive\n" in out
    assert "#SBATCH --gpus-per-node=8\n" in out  # the recipe's pp2xtp8 on 2 nodes: 8 GPUs each


def test_each_default_has_its_switch(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--image", IMAGE, "--no-init", "--no-jit-cache", "--no-exclusive", "--no-gpu-request")
    assert code == 0, err
    assert "INIT=0\n" in out
    assert "JIT_CACHE=''\n" in out
    assert "#SBATCH --exclusive" not in out
    assert "--gpus-per-node" not in out


def test_no_gpu_request_without_the_devices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--image", IMAGE, "--no-devices", "--jit-cache", "/scratch/jit")
    assert code == 0, err
    assert "--gpus-per-node" not in out
    assert "JIT_CACHE=/scratch/jit\n" in out


def test_the_jit_cache_options_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--image", IMAGE, "--jit-cache", "/scratch/jit", "--no-jit-cache")
    assert code == 2
    assert "not allowed with argument" in err

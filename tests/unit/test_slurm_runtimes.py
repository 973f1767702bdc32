"""`imagebuild slurm --runtime`: each runtime's own spelling, and the requests that do not fit a runtime
refused with one line, exit 2, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.importer.manifest import Manifest

IMAGE = "127.0.0.1:5000/imagebuild/kimi-k3@sha256:" + "ab" * 32
BASE = ["slurm", "--nodes", "2", "--variant", "pp2xtp8", "--model-path", "/models/kimi-k3"]


def _export(tmp_path: Path, kind: str | None) -> Path:
    """An export directory as `imagebuild export` writes it: manifest, archive, importer."""
    name = "kimi-k3-cdcdcdcdcdcd.sqfs" if kind == "squashfs" else "kimi-k3-cdcdcdcdcdcd.tar.zst"
    data = Manifest(
        archive=name, sha256="ef" * 32, size=1, compression="zstd", image_id="sha256:" + "cd" * 32,
        manifest_digest="sha256:" + "ab" * 32, uncompressed_size=2, repo_tags=("imagebuild/kimi-k3:gfx942",),
        pins={}, labels={}, imagebuild_version="0.1.0",
    ).to_json()  # fmt: skip
    if kind is not None:
        data["kind"] = kind
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    (tmp_path / name).write_bytes(b"x")
    (tmp_path / "imagebuild-import.pyz").write_text("# the shipped importer\n")
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*BASE, *args])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> str:
    target = tmp_path / "job.sbatch"
    code, out, err = run(capsys, *args, "-o", str(target))
    assert code == 2, err
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert not target.exists()
    return err


def test_podman_spells_the_job_its_own_way(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "--runtime", "podman", "--archive", str(_export(tmp_path, "oci-archive")))
    assert code == 0, err
    for text in (
        'local run=(podman run --name "$CONTAINER" --network host --ipc host)',
        "--group-add keep-groups",  # with crun; runc gets the task's groups by number
        'for gid in $(id -G); do run+=(--group-add "$gid"); done',
        'if ((INIT)); then run+=(--init --init-path "$(podman_init)"); fi',
        "if ((INIT)) && ! podman_init >/dev/null; then",
        'python3 "$ARCHIVE_IMPORTER" "$ARCHIVE_MANIFEST" --runtime podman >/dev/null',
        'podman container exists "$1"',
        'podman rm --force "$1"',
        'podman stop --time "$STOP_TIMEOUT_S"',
        "command -v podman",
    ):
        assert text in out
    assert "docker " not in out.replace("docker's", "")
    assert '--shm-size "$SHM_SIZE"' not in out  # podman refuses it beside --ipc host


def test_charliecloud_runs_the_squashfs_in_place(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    manifest = _export(tmp_path, "squashfs")
    code, out, err = run(
        capsys, "--runtime", "charliecloud", "--archive", str(manifest), "--pass-env", "HF_TOKEN"
    )
    assert code == 0, err
    assert f"SQUASHFS={tmp_path / 'kimi-k3-cdcdcdcdcdcd.sqfs'}\n" in out
    assert 'python3 "$ARCHIVE_IMPORTER" "$ARCHIVE_MANIFEST" --check-only >/dev/null' in out
    # ch-run starts with SIGTERM and SIGINT blocked, so that its own process keeps the image mounted
    # until the launcher, which gets them unblocked, has ended (tests/integration/test_charliecloud_signals.py).
    assert 'run+=("$SQUASHFS" -- python3 -c "$mask" SIG_UNBLOCK python3 /opt/imagebuild/launcher/serve.py)' in out
    assert 'python3 -c "$mask" SIG_BLOCK "${run[@]}" &' in out
    # The read-only squashfs has the mount points export adds; the model is served under its own name.
    assert '-b "$LOG_DIR:/run_logs" -b "$MODEL_PATH:/opt/imagebuild/model"' in out
    assert "--set-env=MODEL_PATH=/opt/imagebuild/model --set-env=MODEL_NAME=kimi-k3" in out
    assert "local run=(ch-run --private-tmp)" in out
    assert 'USER=${USER:-$(id -un)}' in out
    assert '--set-env="NODE_RANK=$SLURM_NODEID"' in out
    assert 'ulimit -H "-$flag" "$hard"' in out  # ch-run has no --ulimit: the task sets them
    assert (
        "no network, IPC or PID namespace" in out
    )  # where docker's --init would be, the script says why there is none
    assert "docker" not in out.split("settings() {")[1].replace("docker's", "")
    assert "cleanup_node" not in out


def test_pyxis_starts_the_container_from_srun(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "--runtime", "pyxis", "--archive", str(_export(tmp_path, "squashfs")))
    assert code == 0, err
    for text in (
        '--container-image="$SQUASHFS" --container-name="colocated_${RECIPE}_${SLURM_JOB_ID}"',
        '--container-mounts="$mounts" --container-env="${names[*]}"',
        '"${step[@]}" --kill-on-bad-exit=1 --label "${PYXIS[@]}" bash -euo pipefail -c run_node',
        "command -v enroot",
        "--check-only",
    ):
        assert text in out
    fetch = out.split("fetch_image() {")[1].split("\n}")[0]
    assert "pull" not in fetch
    # checked only (a squashfs is never imported), enroot's data directory's room first
    assert 'into=$(enroot_data_path)\n    say "checking $SQUASHFS"' in fetch
    assert '--check-only ${into:+--unpack-into "$into"} >/dev/null' in fetch


@pytest.mark.parametrize(
    ("runtime", "kind", "expected"),
    [
        ("docker", "squashfs", "a squashfs, which --runtime docker does not run (it runs a docker archive or an OCI archive; `imagebuild export` writes a docker archive, `--format oci` an OCI one)"),
        ("podman", "squashfs", "a squashfs, which --runtime podman does not run"),
        ("pyxis", None, "a docker archive, which --runtime pyxis does not run (it runs a squashfs; `imagebuild export --format squashfs` writes one)"),
        ("charliecloud", "oci-archive", "an OCI archive, which --runtime charliecloud does not run"),
    ],
)  # fmt: skip
def test_an_archive_of_the_wrong_kind_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, runtime: str, kind: str | None, expected: str
) -> None:
    err = refused(capsys, tmp_path, "--runtime", runtime, "--archive", str(_export(tmp_path, kind)))
    assert expected in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--runtime", "singularity", "--image", IMAGE), "--runtime 'singularity': expected one of docker, podman, pyxis, charliecloud"),
        (("--runtime", "pyxis", "--image", IMAGE), "--image: --runtime pyxis runs a squashfs from shared storage"),
        (("--runtime", "podman", "--image", IMAGE, "--docker-arg=--privileged"), "--docker-arg '--privileged': only --runtime docker"),
        (("--runtime", "podman", "--image", IMAGE, "--shm-size", "64g"), "--shm-size '64g': means nothing to --runtime podman"),
        (("--runtime", "charliecloud", "@SQUASHFS", "--no-init"), "--no-init: --runtime charliecloud has no init to leave out"),
        (("--runtime", "pyxis", "@SQUASHFS", "--stop-timeout", "5"), "--stop-timeout 5: means nothing to --runtime pyxis"),
    ],
)  # fmt: skip
def test_an_option_that_means_nothing_to_the_runtime_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    given = [f"--archive={_export(tmp_path, 'squashfs')}" if arg == "@SQUASHFS" else arg for arg in args]
    assert expected in refused(capsys, tmp_path, *given)


def test_an_unknown_kind_in_the_manifest_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = refused(capsys, tmp_path, "--archive", str(_export(tmp_path, "sif")))
    assert "'kind' must be docker-archive or oci-archive or squashfs, not 'sif'" in err


def test_the_json_document_names_the_runtime(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--runtime", "podman", "--image", IMAGE, "--json")
    assert code == 0, err
    assert json.loads(out)["runtime"] == "podman"

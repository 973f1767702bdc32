"""`imagebuild lock` on the command line: spellings, output streams, exit codes, Ctrl-C."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagebuild.cli import main
from tests.lock.servers import FileServer, SilentServer, processes_mentioning, wait_for, zip_bytes

WHEEL = zip_bytes(("aiter/__init__.py", b"v = 1\n"))
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _in_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def pins_with_wheel(tmp_path: Path, url: str, sha256: str = "", size: int = 0) -> Path:
    path = tmp_path / "pins.toml"
    path.write_text(
        f'# pins\n[aiter]\nkind = "wheel"\nurl = "{url}"\nversion = "0.1.19"\nsha256 = "{sha256}"\nsize = {size}\n',
        encoding="utf-8",
    )
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["lock", "--only", "pins", *argv])  # these pins files have no base image for the python lock
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "spelling",
    [["-U"], ["--upgrade"], ["-P", "aiter"], ["--upgrade-package", "aiter"], ["--upgrade-pin", "aiter"]],
)
def test_upgrade_spellings_of_uv_and_pip_tools(
    file_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], spelling: list[str]
) -> None:
    url = file_server.add("/aiter.whl", WHEEL)
    path = pins_with_wheel(tmp_path, url, sha256="0" * 64, size=1)  # recorded, but not what is served now
    assert run(capsys, "--pins", str(path))[0] == 0
    assert file_server.hits == {}  # a recorded wheel is not re-hashed without an upgrade
    code, out, _ = run(capsys, "--pins", str(path), *spelling)
    assert code == 0
    assert file_server.hits == {"/aiter.whl": 1}
    assert "MOVED" in out
    assert hashlib.sha256(WHEEL).hexdigest() in path.read_text(encoding="utf-8")


def test_dry_run_prints_the_diff_on_stdout_and_writes_nothing(
    file_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = pins_with_wheel(tmp_path, file_server.add("/aiter.whl", WHEEL))
    before = path.read_bytes()
    code, out, err = run(capsys, "--pins", str(path), "--dry-run")
    assert code == 0
    assert path.read_bytes() == before
    lines = out.splitlines()
    assert lines[:2] == ["--- pins.toml (recorded)", "+++ pins.toml"]
    assert '-sha256 = ""' in lines
    assert f'+sha256 = "{hashlib.sha256(WHEEL).hexdigest()}"' in lines
    assert "dry run: " in err  # the table explains the diff, on stderr


def test_progress_goes_to_stderr_one_line_per_source_and_q_silences_it(
    file_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = pins_with_wheel(tmp_path, file_server.add("/aiter.whl", WHEEL))
    code, out, err = run(capsys, "--pins", str(path), "--dry-run")
    assert code == 0
    progress = [line for line in err.splitlines() if line.startswith("[aiter]")]
    assert len(progress) == 1
    assert progress[0].startswith(f"[aiter] url of 0.1.19: {hashlib.sha256(WHEEL).hexdigest()[:12]}")
    code, out, err = run(capsys, "--pins", str(path), "-q")
    assert (code, err) == (0, "")
    assert "wrote " in out


def test_json_on_failure_is_a_document_with_the_error_and_code(
    file_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = pins_with_wheel(tmp_path, file_server.server.url + "/gone.whl")
    before = path.read_bytes()
    code, out, err = run(capsys, "--pins", str(path), "--json")
    assert code == 5
    doc = json.loads(out)
    assert doc["exit_code"] == 5
    assert doc["error"].startswith("[aiter] http://127.0.0.1:")
    assert "HTTP 404" in doc["error"]
    assert err.splitlines()[-1] == f"imagebuild: error: {doc['error']}"
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0"),
        (["--deadline", "nan"], "--deadline must be a positive number of seconds, got nan"),
        (["--jobs", "0"], "--jobs must be at least 1, got 0"),
        (["-P", "aiterr"], "no pin named 'aiterr'. Perhaps you meant 'aiter'?"),
    ],
)
def test_bad_options_are_one_line_exit_2_before_any_request(
    file_server: FileServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
) -> None:
    path = pins_with_wheel(tmp_path, file_server.add("/aiter.whl", WHEEL))
    before = path.read_bytes()
    code, out, err = run(capsys, "--pins", str(path), "--json", *flags)
    assert code == 2
    assert message in err
    assert len(err.splitlines()) == 1
    assert json.loads(out)["exit_code"] == 2
    assert file_server.hits == {}
    assert path.read_bytes() == before


def test_ctrl_c_ends_lock_at_once_leaving_pins_and_no_git_behind(
    silent_server: SilentServer, tmp_path: Path
) -> None:
    path = pins_with_wheel(tmp_path, f"{silent_server.url}/aiter.whl")
    with path.open("a", encoding="utf-8") as f:
        f.write(
            f'\n[mori]\nkind = "git"\nurl = "{silent_server.url}/mori.git"\ntag = "v1.2.2"\ncommit = ""\n'
        )
    before = path.read_bytes()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "imagebuild",
            "lock",
            "--only",
            "pins",
            "--pins",
            str(path),
            "--timeout",
            "30",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        silent_server.wait_for_connections(2)  # the download and git's http helper are both waiting
        assert processes_mentioning(f"127.0.0.1:{silent_server.port}")  # git is running
        proc.send_signal(signal.SIGINT)
        # Well within the 30 s timeout, so nothing waited it out (it takes about a second).
        _, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
        proc.communicate()  # reaped and its pipes closed, also when it timed out
    assert proc.returncode == 130
    assert err.splitlines()[-1] == "imagebuild: interrupted"
    assert "Traceback" not in err
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".pins.toml.lock", "pins.toml"]
    wait_for(lambda: not processes_mentioning(f"127.0.0.1:{silent_server.port}"), "git to be gone", 2)


def test_a_silent_source_fails_the_cli_within_its_timeout(
    silent_server: SilentServer, tmp_path: Path
) -> None:
    path = pins_with_wheel(tmp_path, f"{silent_server.url}/aiter.whl")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "imagebuild", "lock", "--only", "pins", "--pins", str(path), "--timeout", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 5
    assert proc.stderr.splitlines()[-1].startswith("imagebuild: error: [aiter] ")
    assert "timed out after 1s" in proc.stderr
    assert time.monotonic() - started < 3 * 1 + 5  # one timeout, not three (plus interpreter start-up)

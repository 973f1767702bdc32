"""Run the image checks: one container, pytest-testinfra against it, results back as data.

pytest runs in a subprocess, not in-process: the checks get a clean pytest
(their own ini, only the testinfra plugin) whatever pytest configuration or
session the caller is in — ``imagebuild verify`` is itself run from pytest in
this project's tests, and a nested in-process pytest.main would share its
plugins, warning filters and imported modules.

How the checks reach Docker. The image is inspected and its container started
and removed through the ``Engine`` the caller passes in (the one interface to
Docker). The checks themselves run in that pytest subprocess through
testinfra's docker backend (``--hosts=docker://CONTAINER``), which runs each
command as ``docker exec CONTAINER /bin/sh -c ...`` with the ``docker`` CLI:
outside the Engine interface, because testinfra talks to hosts only through
its own backends and a subprocess cannot be handed a Python engine object. So
verify needs the ``docker`` CLI on PATH, and it reaches the same engine as
imagebuild because both take it from the same environment (DOCKER_HOST, else
the current docker context, else /var/run/docker.sock).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from imagebuild.engine.interface import Engine, ImageInfo
from imagebuild.errors import CommandError, VerifyError
from imagebuild.inputs.layout import SECRET_SCAN_MAX_FILE_BYTES, SECRET_SCAN_ROOTS
from imagebuild.inputs.values import ABSOLUTE_PATH
from imagebuild.project import Inputs
from imagebuild.util.run import run_command
from imagebuild.verify import checks
from imagebuild.verify.checks.support import CONTEXT_ENV, RESULTS_ENV
from imagebuild.verify.expectations import Expectations, build_expectations
from imagebuild.verify.layers import layer_secrets_check
from imagebuild.verify.result import OUTCOMES, CheckResult, Outcome, VerifyResult

PYTEST_TIMEOUT_S = 300
CHECKS_DIR = Path(checks.__file__).resolve().parent
# The checks' own pytest configuration: nothing from the caller's pyproject or plugins.
PYTEST_INI = """\
[pytest]
python_files = test_*.py
addopts = -p no:cacheprovider
junit_family = xunit2
junit_suite_name = imagebuild-verify
junit_logging = no
"""


@dataclass(frozen=True, kw_only=True)
class VerifyOptions:
    image: str  # image ref or id
    junit: Path | None = None  # write JUnit XML here
    secret_scan_roots: tuple[str, ...] = SECRET_SCAN_ROOTS  # whose files are scanned for credentials


@dataclass(frozen=True, kw_only=True)
class PreparedVerify:
    """A verify run checked before the engine is asked: its options and what the image must hold."""

    options: VerifyOptions
    expectations: Expectations
    arch: str
    pins_path: Path  # what the expectations were made from, for the progress line


def prepare_verify(inputs: Inputs, options: VerifyOptions) -> PreparedVerify:
    """What the image must hold, and the tools the checks need: all that can fail before the engine is asked."""
    if shutil.which("docker") is None:
        msg = "verify runs its checks with testinfra through the `docker` CLI (docker exec), which is not on PATH; install it (docker.io)"
        raise VerifyError(msg)
    for root in options.secret_scan_roots:
        ABSOLUTE_PATH.check(root, "--scan-root", "root")
    return PreparedVerify(
        options=options,
        expectations=build_expectations(
            inputs, image=options.image, secret_scan_roots=options.secret_scan_roots
        ),
        arch=inputs.arch.name,
        pins_path=inputs.pins.path,
    )


def verify(
    prepared: PreparedVerify, engine: Engine, *, progress: Callable[[str], None] | None = None
) -> VerifyResult:
    """Check a built image against the inputs it was built from; the result says which checks failed and why.

    ``prepared`` is ``prepare_verify``'s, taken as it is. The engine is the caller's (opened and
    closed by it, as for build). Raises VerifyError only when the checks could not run at all (a
    failed check is a result), EngineError when the image or a container is out of reach.
    """
    options, arch = prepared.options, prepared.arch
    say = progress or (lambda _: None)
    started = time.monotonic()
    info = engine.inspect_image(options.image)
    say(f"verify: {options.image} ({info.described}) on {engine.store().describe()} against {prepared.pins_path}, arch {arch}")
    container = engine.start(info.id, network_mode="none")  # the checks need no network
    try:
        say(f"verify: container {container[:12]} started; running the checks")
        results = run_checks(
            expectations=prepared.expectations, info=info, container=container, junit=options.junit
        )
    finally:
        engine.remove(container)
        say(f"verify: container {container[:12]} removed")
    say(f"verify: scanning every layer's files under {', '.join(options.secret_scan_roots)} for credentials")
    layer_check = layer_secrets_check(
        engine, info, roots=options.secret_scan_roots, max_bytes=SECRET_SCAN_MAX_FILE_BYTES
    )
    results += (layer_check,)
    if options.junit is not None and options.junit.is_file():
        add_to_junit(options.junit, layer_check)
    return VerifyResult(
        image=options.image,
        image_id=info.identity,
        engine_id="" if info.identity == info.id else info.id,
        arch=arch,
        checks=results,
        duration_s=time.monotonic() - started,
        junit=str(options.junit) if options.junit else None,
    )


def image_context(info: ImageInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "labels": dict(info.labels),
        "env": dict(info.env),
        "entrypoint": list(info.entrypoint) if info.entrypoint is not None else None,
        "workdir": info.workdir,
        "history": list(info.history),
    }


def run_checks(
    *, expectations: Expectations, info: ImageInfo, container: str, junit: Path | None
) -> tuple[CheckResult, ...]:
    """pytest over the check modules against a running container; the per-check records it wrote."""
    with tempfile.TemporaryDirectory(prefix="imagebuild-verify-") as tmp:
        work = Path(tmp)
        context = work / "context.json"
        context.write_text(
            json.dumps({"expectations": expectations.to_json(), "image": image_context(info)}),
            encoding="utf-8",
        )
        results = work / "results.json"
        ini = work / "pytest.ini"
        ini.write_text(PYTEST_INI, encoding="utf-8")
        command = [
            sys.executable, "-m", "pytest", str(CHECKS_DIR),
            "-c", str(ini), "--rootdir", str(work),
            "-p", "testinfra.plugin", f"--hosts=docker://{container}",
            "-q", "--tb=line", "--no-header",
        ]  # fmt: skip
        if junit is not None:
            junit.parent.mkdir(parents=True, exist_ok=True)
            command.append(f"--junitxml={junit}")
        env = {
            **os.environ,
            CONTEXT_ENV: str(context),
            RESULTS_ENV: str(results),
            # Only the plugins named above: a caller's plugins must not change how the checks run.
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            # The checks may live in a read-only site-packages.
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        try:
            done = run_command(command, env=env, timeout=PYTEST_TIMEOUT_S, check=False)
        except CommandError as e:
            msg = f"the image checks did not run to the end (container {container[:12]}): {e}"
            raise VerifyError(msg) from e
        output = f"{done.stdout}{done.stderr}"
        # pytest: 0 all passed, 1 some failed; anything else means the checks themselves broke.
        if done.returncode not in (0, 1) or not results.is_file():
            tail = "\n".join(output.strip().splitlines()[-30:])
            msg = f"the image checks could not run (pytest exit {done.returncode}): {' '.join(command[:4])} ...\n{tail}"
            raise VerifyError(msg)
        return parse_results(json.loads(results.read_text(encoding="utf-8")))


def add_to_junit(junit: Path, check: CheckResult) -> None:
    """Add a check that ran outside pytest (the layer scan) to pytest's JUnit XML, so the file still
    has one testcase per check and its counts agree with the report."""
    tree = ET.parse(junit)
    suite = tree.getroot() if tree.getroot().tag == "testsuite" else tree.getroot().find("testsuite")
    if suite is None:
        return
    case = ET.SubElement(suite, "testcase", classname=f"test_{check.group}", name=check.name,
                         time=f"{check.duration_s:.3f}")  # fmt: skip
    counter = {"failed": "failures", "error": "errors", "skipped": "skipped"}.get(check.outcome)
    if counter is not None:
        tag = {"failures": "failure", "errors": "error", "skipped": "skipped"}[counter]
        ET.SubElement(case, tag, message=check.message.splitlines()[0] if check.message else "").text = check.message
        suite.set(counter, str(int(suite.get(counter, "0")) + 1))
    suite.set("tests", str(int(suite.get("tests", "0")) + 1))
    tree.write(junit, encoding="utf-8", xml_declaration=True)


def parse_results(data: dict[str, Any]) -> tuple[CheckResult, ...]:
    checks_: list[CheckResult] = []
    for item in data.get("results", []):
        outcome = item.get("outcome")
        if outcome not in OUTCOMES:
            outcome = "error"
        checks_.append(
            CheckResult(
                name=str(item["name"]),
                group=str(item["group"]),
                outcome=cast(Outcome, outcome),
                message=str(item.get("message", "")),
                duration_s=float(item.get("duration_s", 0.0)),
            )
        )
    return tuple(checks_)

"""Run the image checks: one container, pytest-testinfra against it (check_session), results back as data.

How the checks reach Docker. The image is inspected and its container started
and removed through the ``Engine`` the caller passes in (the one interface to
Docker). The checks themselves run in that pytest subprocess through
testinfra's docker backend (``--hosts=docker://CONTAINER``), which runs each
command as ``docker exec CONTAINER /bin/sh -c ...`` with the ``docker`` CLI:
outside the Engine interface, because testinfra talks to hosts only through
its own backends and a subprocess cannot be handed a Python engine object. So
verify needs the ``docker`` CLI on PATH, and it reaches the same engine as
imagebuild because both find it as the CLI does (DOCKER_HOST, else the context
DOCKER_CONTEXT names, else the config's current one, else /var/run/docker.sock:
``imagebuild.importer.docker_context``).
"""

from __future__ import annotations

import json
import shutil
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from imagebuild.engine.interface import Engine, ImageInfo
from imagebuild.errors import CommandError, ConfigError, VerifyError
from imagebuild.inputs.layout import SECRET_SCAN_MAX_FILE_BYTES, SECRET_SCAN_ROOTS
from imagebuild.inputs.values import scan_root_problem
from imagebuild.project import Inputs
from imagebuild.util.files import atomic_file
from imagebuild.verify.check_session import check_session
from imagebuild.verify.checks_file import EMPTY, ChecksFile
from imagebuild.verify.expectations import Expectations, build_expectations
from imagebuild.verify.layers import layer_secrets_check
from imagebuild.verify.result import OUTCOMES, CheckResult, Outcome, VerifyResult
from imagebuild.verify.selection import ListedCheck, keyword_expression, layer_check_selected, list_checks

PYTEST_RAN = (0, 1)  # all passed, some failed
JUNIT_MODE = 0o644  # a report CI uploads: readable, as pytest's own --junitxml file is
NONE_SELECTED = 5  # pytest: no item selected (-k picked only the layer scan)

@dataclass(frozen=True, kw_only=True)
class VerifyOptions:
    image: str  # image ref or id
    junit: Path | None = None  # write JUnit XML here
    secret_scan_roots: tuple[str, ...] = SECRET_SCAN_ROOTS  # whose files are scanned for credentials
    checks_file: ChecksFile = EMPTY  # the project's own checks (checks.toml), run with the built-in ones
    keyword: str | None = None  # -k: pytest's keyword expression over every check's name


@dataclass(frozen=True, kw_only=True)
class PreparedVerify:
    """A verify run checked before the engine is asked: its options and what the image must hold."""

    options: VerifyOptions
    expectations: Expectations
    arch: str
    pins_path: Path  # what the expectations were made from, for the progress line
    selected: tuple[ListedCheck, ...] = ()  # with -k: the checks it selects (never empty)


def prepare_verify(inputs: Inputs, options: VerifyOptions) -> PreparedVerify:
    """What the image must hold, and the tools the checks need: all that can fail before the engine is asked."""
    if shutil.which("docker") is None:
        msg = "verify runs its checks with testinfra through the `docker` CLI (docker exec), which is not on PATH; install it (docker.io)"
        raise VerifyError(msg)
    for root in options.secret_scan_roots:  # the CLI checked them as it parsed them; a caller may not have
        problem = scan_root_problem(root)
        if problem:
            msg = f"--scan-root {problem}"
            raise ConfigError(msg)
    expectations = build_expectations(inputs, image=options.image, secret_scan_roots=options.secret_scan_roots)
    selected: tuple[ListedCheck, ...] = ()
    if options.keyword is not None:
        keyword_expression(options.keyword)
        selected = checks_listed(expectations, options.checks_file, options.keyword)
        if not selected:
            msg = f"-k {options.keyword!r} selects no check; `imagebuild verify --list` shows their names"
            raise ConfigError(msg)
    return PreparedVerify(
        options=options, expectations=expectations, arch=inputs.arch.name, pins_path=inputs.pins.path,
        selected=selected,
    )  # fmt: skip


def checks_listed(expectations: Expectations, checks_file: ChecksFile, keyword: str | None) -> tuple[ListedCheck, ...]:
    """What verify would run (``verify --list``): collected with the same context, no image needed."""
    context = {"expectations": expectations.to_json(), "image": None, "checks": checks_file.to_json()}
    return list_checks(context, checks_file, keyword)


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
        results, junit_xml = run_checks(
            expectations=prepared.expectations, info=info, container=container, junit=options.junit is not None,
            checks_file=options.checks_file, keyword=options.keyword,
        )  # fmt: skip
    finally:
        engine.remove(container)
        say(f"verify: container {container[:12]} removed")
    saved: list[str] = []  # the config digest docker save gave, where the layers were read from it
    if layer_check_selected(options.keyword):
        say(f"verify: scanning every layer's files under {', '.join(options.secret_scan_roots)} for credentials")
        layer_check = layer_secrets_check(
            engine, info, roots=options.secret_scan_roots, max_bytes=SECRET_SCAN_MAX_FILE_BYTES,
            saved_config=saved.append,
        )  # fmt: skip
        results += (layer_check,)
        if junit_xml is not None:
            junit_xml = add_to_junit(junit_xml, layer_check)
    if options.junit is not None and junit_xml is not None:
        options.junit.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(options.junit, mode=JUNIT_MODE) as out:  # whole, or the old file kept
            out.write(junit_xml)
    identity = info.identity or next(iter(saved), "")  # where the store did not give it, the saved config does
    return VerifyResult(
        image=options.image,
        image_id=identity,
        engine_id="" if identity == info.id else info.id,
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
        "cmd": list(info.cmd) if info.cmd is not None else None,
        "workdir": info.workdir,
        "user": info.user,
        "exposed_ports": list(info.exposed_ports),
        "history": list(info.history),
    }


def run_checks(
    *, expectations: Expectations, info: ImageInfo, container: str, junit: bool,
    checks_file: ChecksFile = EMPTY, keyword: str | None = None,
) -> tuple[tuple[CheckResult, ...], bytes | None]:  # fmt: skip
    """pytest over the check modules against a running container: the per-check records it wrote, and
    with ``junit`` its JUnit XML (None when no check ran)."""
    context = {"expectations": expectations.to_json(), "image": image_context(info), "checks": checks_file.to_json()}
    args = [f"--hosts=docker://{container}", "--tb=line"]
    try:
        with check_session(context, args, keyword=keyword, junit=junit) as session:
            done = session.done
            # Anything but "ran" means the checks themselves broke.
            ran = done.returncode in PYTEST_RAN and session.results.is_file()
            if not ran and done.returncode != NONE_SELECTED:
                tail = "\n".join(f"{done.stdout}{done.stderr}".strip().splitlines()[-30:])
                msg = f"the image checks could not run (pytest exit {done.returncode}): {' '.join(session.command[:4])} ...\n{tail}"
                raise VerifyError(msg)
            junit_xml = session.junit.read_bytes() if junit and session.junit.is_file() else None
            if not session.results.is_file():
                return (), junit_xml
            return parse_results(json.loads(session.results.read_text(encoding="utf-8"))), junit_xml
    except CommandError as e:
        msg = f"the image checks did not run to the end (container {container[:12]}): {e}"
        raise VerifyError(msg) from e


def add_to_junit(junit_xml: bytes, check: CheckResult) -> bytes:
    """pytest's JUnit XML with a check that ran outside pytest (the layer scan) added, so the file has
    one testcase per check and its counts agree with the report."""
    root = ET.fromstring(junit_xml)  # pytest's own output, written moments ago in our tmp dir
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return junit_xml
    case = ET.SubElement(suite, "testcase", classname=f"test_{check.group}", name=check.name,
                         time=f"{check.duration_s:.3f}")  # fmt: skip
    counter = {"failed": "failures", "error": "errors", "skipped": "skipped"}.get(check.outcome)
    if counter is not None:
        tag = {"failures": "failure", "errors": "error", "skipped": "skipped"}[counter]
        ET.SubElement(case, tag, message=check.message.splitlines()[0] if check.message else "").text = check.message
        suite.set(counter, str(int(suite.get(counter, "0")) + 1))
    suite.set("tests", str(int(suite.get("tests", "0")) + 1))
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))


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

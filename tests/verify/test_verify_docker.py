"""verify against real containers: a good image passes; each deliberately broken one fails its check."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagebuild.engine.interface import Engine
from imagebuild.inputs.layout import VERSIONS_FILE
from imagebuild.project import find_project
from imagebuild.verify import VerifyOptions, VerifyResult, prepare_verify, verify
from tests.verify.verify_support import REPO, GoodImage

pytestmark = pytest.mark.docker
BUDGET_S = 20.0  # the whole verify against a built image


def _verify(engine: Engine, good: GoodImage, image: str, junit: Path | None = None) -> VerifyResult:
    inputs = find_project(REPO, good.pins).load("gfx942")
    return verify(prepare_verify(inputs, VerifyOptions(image=image, junit=junit)), engine)


def _failed(result: VerifyResult) -> dict[str, str]:
    return {f"{c.group}::{c.name}": c.message for c in result.failures}


def test_good_image_passes_within_budget(in_repo: Path, engine: Engine, good_image: GoodImage) -> None:
    result = _verify(engine, good_image, good_image.image)
    assert result.passed, result.format_report()
    groups = {c.group for c in result.checks}
    assert groups == {
        "config",
        "versions",
        "constraint",
        "scrub",
        "graft",
        "nixl",
        "router",
        "launcher",
        "secrets",
        "python",
    }
    assert result.duration_s < BUDGET_S, result.format_report()


@dataclass(frozen=True, kw_only=True)
class Broken:
    """A good image with one build step undone, and the one check that must catch it."""

    lines: str  # Dockerfile lines after FROM <good image>
    check: str  # group::name of the check that must fail, first in the report
    found: str  # what its message must show as found
    also: frozenset[str] = frozenset()  # checks the same change rightly fails too
    buildargs: dict[str, str] | None = None
    files: dict[str, bytes] | None = None  # context files (rootfs/NAME) the lines COPY


BROKEN = {
    "scrub-skipped": Broken(
        lines="RUN touch /root/.mori/x.hsaco.lock",
        check="scrub::test_empty_dir[/root/.mori]",
        found="x.hsaco.lock",
    ),
    "flydsl-repin-skipped": Broken(
        lines="RUN echo 'from donor' > {site_packages}/flydsl/donor_only.py",
        check="graft::test_record",
        found="flydsl/donor_only.py",
    ),
    "token-in-history": Broken(
        lines='ARG GH_TOKEN\nRUN echo "$GH_TOKEN" > /dev/null',
        buildargs={"GH_TOKEN": "ghp_" + "x1" * 18},
        check="secrets::test_no_secrets_in_history",
        found="GH_T",
    ),
    "token-in-a-copied-file": Broken(
        lines="COPY rootfs/deploy.env /opt/app/deploy.env",
        files={"deploy.env": b"REGION=eu\nGH_TOKEN=ghp_" + b"x1" * 18 + b"\n"},
        check="secrets::test_no_secrets_in_files",
        found="/opt/app/deploy.env:2: GitHub token: ...REGION=eu GH_TOKEN=<redacted 40 chars>",
        also=frozenset({"secrets::test_no_secrets_in_layers"}),  # it is in a layer too
    ),
    "token-in-a-file-a-later-layer-deletes": Broken(
        lines="COPY rootfs/deploy.env /tmp/deploy.env\nRUN rm /tmp/deploy.env",
        files={"deploy.env": b"REGION=eu\nGH_TOKEN=ghp_" + b"x1" * 18 + b"\n"},
        check="secrets::test_no_secrets_in_layers",
        found="/tmp/deploy.env:2: GitHub token: ...REGION=eu GH_TOKEN=<redacted 40 chars>",
    ),
    "base64-token-under-home": Broken(
        lines="COPY rootfs/config.json /home/builder/.docker/config.json",
        files={"config.json": b'{"auths": {"r": {"auth": "ZGVwbG95OmdocF94MXgxeDF4MXgxeDF4MXgxeDF4MXgxeDF4MXgxeDF4MXgxeDF4MXgxeDF4MQ=="}}}'},
        check="secrets::test_no_secrets_in_files",
        found="/home/builder/.docker/config.json:1: GitHub token, base64-encoded",
        also=frozenset({"secrets::test_no_secrets_in_layers"}),
    ),
    "setuptools-too-new": Broken(
        # What a no-isolation build would import: a setuptools the build constraint refuses.
        lines="RUN d={site_packages}/setuptools-80.9.0.dist-info && mkdir -p $d "
        "&& printf 'Metadata-Version: 2.1\\nName: setuptools\\nVersion: 80.9.0\\n' > $d/METADATA",
        check="constraint::test_final_setuptools_satisfies",
        found="setuptools 80.9.0",
        # It is also not the setuptools the guard's step recorded: a later step changed it.
        also=frozenset({"constraint::test_guard_setuptools"}),
    ),
    "wrong-sha": Broken(
        lines="RUN sed -i 's/^MORI_REF=.*/MORI_REF=deadbeefdeadbeefdeadbeefdeadbeefdeadbeef/' {versions_file}",
        check="versions::test_version_line[MORI_REF]",
        found="MORI_REF=deadbeef",
    ),
    "guard-left-setuptools-80": Broken(
        lines="RUN sed -i 's/^GUARD_SETUPTOOLS=[^ ]*/GUARD_SETUPTOOLS=80.9.0/' {versions_file}",
        check="constraint::test_guard_setuptools",
        found="80.9.0 (the image's own",
    ),
    "package-list-missing": Broken(
        lines="RUN rm /app/python-packages.txt",
        check="versions::test_installed_packages_are_recorded[python]",
        found="no such file",
    ),
    "tuning-env": Broken(
        lines="ENV KV_CACHE_DTYPE=fp8", check="config::test_no_tuning_env", found="KV_CACHE_DTYPE=fp8"
    ),
}


@pytest.mark.parametrize("case", BROKEN.values(), ids=BROKEN.keys())
def test_broken_image_fails_naming_the_check(
    in_repo: Path, engine: Engine, good_image: GoodImage, derived_image: Callable[..., str], case: Broken
) -> None:
    exp = good_image.expectations
    lines = case.lines.format(site_packages=exp.python.site_packages, versions_file=VERSIONS_FILE)
    result = _verify(engine, good_image, derived_image(lines, buildargs=case.buildargs, files=case.files))
    failed = _failed(result)
    assert not result.passed
    assert set(failed) == {case.check} | case.also, result.format_report()
    assert "expected:" in failed[case.check]
    assert case.found in failed[case.check], failed[case.check]
    report = result.format_report()
    assert report.splitlines()[1].split() == ["FAILED", *case.check.replace("::", ": ").split()]
    # The report says where a token is, never the token itself.
    assert all(value not in report for value in (case.buildargs or {}).values())
    assert "x1x1x1" not in report


def test_junit_and_json(in_repo: Path, engine: Engine, good_image: GoodImage,
                        derived_image: Callable[..., str], tmp_path: Path) -> None:  # fmt: skip
    image = derived_image("ENV KV_CACHE_DTYPE=fp8")
    junit = tmp_path / "reports" / "verify.xml"
    result = _verify(engine, good_image, image, junit=junit)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("name") == "imagebuild-verify"
    assert int(suite.get("tests", "0")) == len(result.checks)
    assert suite.get("failures") == "1"
    failures = [case for case in suite.iter("testcase") if case.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failures] == [("test_config", "test_no_tuning_env")]
    failure = failures[0].find("failure")
    assert failure is not None
    assert "KV_CACHE_DTYPE=fp8" in (failure.get("message") or "") + (failure.text or "")

    data = json.loads(json.dumps(result.to_json()))
    assert data["passed"] is False
    assert data["junit"] == str(junit)
    assert [c["name"] for c in data["checks"] if c["outcome"] == "failed"] == ["test_no_tuning_env"]


def test_missing_image_is_an_engine_error(in_repo: Path, engine: Engine, good_image: GoodImage) -> None:
    from imagebuild.errors import EngineError

    with pytest.raises(EngineError, match="no image 'imagebuild-verify-test/absent:nope'"):
        _verify(engine, good_image, "imagebuild-verify-test/absent:nope")

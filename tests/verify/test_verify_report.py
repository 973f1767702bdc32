"""The human report and the JSON summary (no docker)."""

from __future__ import annotations

import json

from imagebuild.verify.result import CheckResult, VerifyResult


def _result(*checks: CheckResult) -> VerifyResult:
    return VerifyResult(image="imagebuild/kimi-k3:gfx942", image_id="sha256:" + "ab" * 32, arch="gfx942",
                        checks=checks, duration_s=3.21, junit="/tmp/j.xml")  # fmt: skip


PASS = CheckResult(name="test_workdir", group="config", outcome="passed")
FAIL = CheckResult(
    name="test_version_line[MORI_REF]",
    group="versions",
    outcome="failed",
    message="/app/versions.txt: exactly one MORI_REF line\nexpected: MORI_REF=aaa\nfound:    MORI_REF=bbb",
)
ERROR = CheckResult(name="test_record", group="graft", outcome="error", message="fact probe failed")


def test_failed_checks_first_with_expected_and_found() -> None:
    report = _result(PASS, FAIL, ERROR).format_report()
    lines = report.splitlines()
    assert "FAILED, 1 passed, 1 failed, 1 errors in 3.2 s" in lines[0]
    assert lines[1].split() == ["ERROR", "graft:", "test_record"]
    failed = lines.index("  FAILED versions: test_version_line[MORI_REF]")
    assert lines[failed + 2].strip() == "expected: MORI_REF=aaa"
    assert lines[failed + 3].strip() == "found:    MORI_REF=bbb"
    assert "test_workdir" not in report  # passing checks only count in the summary
    assert "config 1/1" in report
    assert "versions 0/1" in report
    assert "JUnit XML: /tmp/j.xml" in report


def test_passed_report() -> None:
    result = _result(PASS)
    assert result.passed
    assert "PASSED, 1 passed, 0 failed, 0 errors" in result.format_report()


def test_no_checks_is_not_a_pass() -> None:
    result = _result()
    assert not result.passed
    assert "no checks ran" in result.format_report()


def test_to_json() -> None:
    data = json.loads(json.dumps(_result(PASS, FAIL).to_json()))
    assert data["passed"] is False
    assert data["counts"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 0}
    assert data["checks"][1] == {
        "name": "test_version_line[MORI_REF]",
        "group": "versions",
        "outcome": "failed",
        "message": FAIL.message,
        "duration_s": 0.0,
    }
    assert data["image_id"].startswith("sha256:")

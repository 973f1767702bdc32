"""The proven_k3 graft: donor AITER trees with the K3-tuned configs, and flydsl re-pinned over them
where the arch profile re-pins it (gfx942: its RECORD checked); where the profile keeps the donor's
(gfx950), no metadata may claim the grafted tree."""

from __future__ import annotations

from typing import Any

import pytest

from imagebuild.verify.checks.support import expect, expectations
from imagebuild.verify.image_facts import GRAFT_DIRS, GRAFT_PACKAGES, REPINNED_PIN, TUNED_CONFIG_ROOTS

EXP = expectations()
# The re-pin checks apply where the profile re-pins the grafted flydsl ([graft] repinned).
repinned_only = pytest.mark.skipif(
    EXP.graft.repinned is None, reason=f"arch {EXP.arch} keeps the donor's {REPINNED_PIN} (no re-pin)"
)
kept_only = pytest.mark.skipif(
    EXP.graft.repinned is not None,
    reason=f"arch {EXP.arch} re-pins {REPINNED_PIN} over the graft (its RECORD is checked instead)",
)


@pytest.mark.parametrize("package", GRAFT_PACKAGES)
def test_package_present(facts: dict[str, Any], package: str) -> None:
    found = facts["graft"]["packages"][package]
    expect(
        found,
        f"{package} grafted into the base's site-packages",
        expected=f"{EXP.python.site_packages}/{package}/",
        found="missing",
    )


@pytest.mark.parametrize("path", GRAFT_DIRS)
def test_graft_dir(facts: dict[str, Any], path: str) -> None:
    # Older AITER lacks it: "No module named 'aiter.ops.triton.conv'".
    found = facts["graft"]["dirs"][path]
    expect(
        found, f"{path} (AITER >= 0.1.19)", expected=f"{EXP.python.site_packages}/{path}/", found="missing"
    )


@pytest.mark.parametrize("name", EXP.graft.tuned_configs)
def test_tuned_config(facts: dict[str, Any], name: str) -> None:
    # Without them LLVM aborts: "Do not know how to expand this operator's operand!".
    found = facts["graft"]["configs"][name]
    expect(
        bool(found),
        f"K3-tuned MoE config {name}",
        expected=f"{name} under {' or '.join(f'{EXP.python.site_packages}/{r}/' for r in TUNED_CONFIG_ROOTS)}",
        found=", ".join(found) or "not found",
    )


@repinned_only
def test_single_dist_info(facts: dict[str, Any]) -> None:
    infos = facts["graft"]["dist_infos"]
    expect(
        len(infos) == 1 and infos[0]["path"].startswith(EXP.python.site_packages + "/"),
        f"exactly one {REPINNED_PIN} dist-info on sys.path, in the base's site-packages",
        expected=f"{EXP.python.site_packages}/{REPINNED_PIN}-{EXP.python.repinned_version}.dist-info",
        found=", ".join(f"{i['path']} ({i['version']})" for i in infos) or "none",
    )


@repinned_only
def test_dist_version(facts: dict[str, Any]) -> None:
    versions = [i["version"] for i in facts["graft"]["dist_infos"]]
    expect(
        versions == [EXP.python.repinned_version],
        f"{REPINNED_PIN} version (pin [{REPINNED_PIN}] of {EXP.pins_path})",
        expected=EXP.python.repinned_version,
        found=", ".join(versions) or "not installed",
    )


@repinned_only
def test_record(facts: dict[str, Any]) -> None:
    """Metadata alone is not enough: the donor's code under 0.2.4 metadata is the WorkerProc ImportError."""
    record = facts["graft"]["record"]
    tool = facts["graft"]["check_tool"]
    tool_says = (tool["stderr"] or tool["stdout"]).strip().splitlines()
    tool_line = f"imagebuild-check check-record: exit {tool['rc']}: {tool_says[-1] if tool_says else ''}"
    expect(
        record is not None,
        f"{REPINNED_PIN} RECORD",
        expected="one dist-info with a RECORD",
        found=f"none to check; {tool_line}",
    )
    expect("error" not in record, f"{REPINNED_PIN} RECORD", expected="a RECORD", found=record.get("error"))
    problems = [
        f"{record[kind + '_count']} {kind}: {', '.join(record[kind])}"
        for kind in ("mismatched", "missing", "foreign")
        if record[kind + "_count"]
    ]
    expect(
        not problems and tool["rc"] == 0,
        f"every file of {REPINNED_PIN} matches its RECORD, no foreign files in the package (the re-pin replaced the donor's tree)",
        expected=f"{record['files']} files as RECORDed, nothing else; imagebuild-check check-record exit 0",
        found="; ".join([*problems, tool_line]),
    )


@kept_only
def test_kept_tree_has_no_foreign_metadata(facts: dict[str, Any]) -> None:
    """The graft copies the donor's tree without a dist-info: one on the path (the base's, or an
    install's) would describe other code than the grafted one, the WorkerProc ImportError again."""
    infos = facts["graft"]["dist_infos"]
    expect(
        not infos,
        f"the donor's {REPINNED_PIN} kept as grafted (no re-pin on {EXP.arch}): no {REPINNED_PIN} dist-info "
        "describes other code than the grafted tree",
        expected=f"no {REPINNED_PIN}-*.dist-info on python3's sys.path",
        found=", ".join(f"{i['path']} ({i['version']})" for i in infos),
    )

"""JIT state scrubbed and no build leftovers: stale MoRI locks deadlock ep:0 init at run time."""

from __future__ import annotations

from typing import Any

import pytest

from imagebuild.verify.checks.support import expect
from imagebuild.verify.image_facts import ABSENT_PATHS, EMPTY_DIRS, TMP_LEFTOVERS


@pytest.mark.parametrize("path", EMPTY_DIRS)
def test_empty_dir(facts: dict[str, Any], path: str) -> None:
    state = facts["empty_dirs"][path]
    found = (
        "missing" if not state["exists"] else "not a directory" if not state["is_dir"]
        else f"{len(state['entries'])}+ entries: {', '.join(state['entries'])}"
    )  # fmt: skip
    expect(
        state["is_dir"] and not state["entries"],
        f"{path} must exist and be empty (MoRI JIT locks scrubbed as the last step)",
        expected="an empty directory",
        found=found,
    )


@pytest.mark.parametrize("pattern", ABSENT_PATHS)
def test_absent(facts: dict[str, Any], pattern: str) -> None:
    found = facts["absent"][pattern]
    expect(
        not found, f"{pattern} must not exist (stale JIT state)", expected="nothing", found=", ".join(found)
    )


def test_no_build_leftovers(facts: dict[str, Any]) -> None:
    found = [*facts["tmp_leftovers"], *facts["tmp_wheels"]]
    expect(
        not found,
        "source trees and downloaded wheels must be removed by the step that used them",
        expected=f"none of {', '.join(TMP_LEFTOVERS)} and no *.whl under /tmp",
        found=", ".join(found),
    )

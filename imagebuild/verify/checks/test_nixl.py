"""Step 10's NIXL layer, when the image was built with it (WITH_NIXL=1): each library is there and
every library it links against resolves with the image's own environment (LD_LIBRARY_PATH)."""

from __future__ import annotations

from typing import Any

import pytest

from imagebuild.verify.checks.support import expect, expectations

EXP = expectations()


@pytest.mark.parametrize("library", EXP.layer_libraries, ids=lambda p: p.rsplit("/", 1)[-1])
def test_layer_library_loads(facts: dict[str, Any], library: str) -> None:
    found = facts["layer_libraries"][library]
    expect(found["exists"], f"{library} (step 10, WITH_NIXL=1)", expected="a file", found="no such file")
    ldd = found["ldd"]
    missing = [line.strip() for line in ldd["stdout"].splitlines() if "not found" in line]
    expect(
        ldd["rc"] == 0 and not missing,
        f"ldd {library}: every library it links against resolves",
        expected="exit 0, nothing 'not found'",
        found=f"exit {ldd['rc']}: {' | '.join(missing) or ldd['stderr'].strip()[-300:]}",
    )

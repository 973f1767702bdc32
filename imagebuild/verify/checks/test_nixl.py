"""Step 10's NIXL layer, when the image was built with it (WITH_NIXL=1): each library is there and
every library it links against resolves with the image's own environment (LD_LIBRARY_PATH)."""

from __future__ import annotations

from typing import Any

import pytest

from imagebuild.verify.checks.support import expect, expectations

EXP = expectations()


# None: a WITH_NIXL=0 build, reported as one skipped check that says why.
LIBRARIES: tuple[str | None, ...] = EXP.layer_libraries or (None,)


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda p: p.rsplit("/", 1)[-1] if p else "off")
def test_layer_library_loads(facts: dict[str, Any], library: str | None) -> None:
    if library is None:
        pytest.skip("WITH_NIXL=0: the image has no NIXL layer (verify --build-arg WITH_NIXL=1 checks one)")
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

"""No credential anywhere a `docker pull` exposes: history, config ENV, labels, versions.txt and files.

One detector (imagebuild.secrets) for all of them: the same patterns refuse a
credential in the build's inputs. Findings are shown redacted, never whole.
"""

from __future__ import annotations

from typing import Any

import pytest

from imagebuild.inputs.layout import VERSIONS_FILE
from imagebuild.secrets import SECRET_PATTERNS, find_secrets
from imagebuild.verify.checks.support import expect, image_config

KINDS = ", ".join(p.kind for p in SECRET_PATTERNS)


def _scan(where: str, texts: list[tuple[str, str]]) -> None:
    found = [f"{name}: {f.kind}: {f.shown}" for name, text in texts for f in find_secrets(text)]
    expect(
        not found,
        f"credential-like strings in the image {where} (anyone who pulls the image can read them)",
        expected=f"none of: {KINDS}",
        found="; ".join(found[:10]),
    )


def test_no_secrets_in_history() -> None:
    history = image_config().history
    _scan("history", [(f"layer {len(history) - i}", h) for i, h in enumerate(history)])


def test_no_secrets_in_env() -> None:
    _scan("ENV", [(f"ENV {k}", f"{k}={v}") for k, v in image_config().env.items()])


def test_no_secrets_in_labels() -> None:
    _scan("labels", [(f"label {k}", f"{k}={v}") for k, v in image_config().labels.items()])


def test_no_secrets_in_versions(facts: dict[str, Any]) -> None:
    lines = (facts["versions"] or "").splitlines()
    _scan(VERSIONS_FILE, [(f"{VERSIONS_FILE}:{n}", line) for n, line in enumerate(lines, 1)])


def test_no_secrets_in_files(facts: dict[str, Any]) -> None:
    scan = facts["secret_files"]
    found = [f"{f['path']}:{f['line']}: {f['kind']}: {f['shown']}" for f in scan["findings"]]
    expect(
        not found,
        f"credential-like strings in files under {', '.join(scan['roots'])} "
        f"({scan['found']} found in {scan['scanned']} text files)",
        expected=f"none of: {KINDS}",
        found="; ".join(found[:10]),
    )
    if scan["over_budget"]:
        pytest.skip(
            f"the scan stopped reading after its byte budget: {scan['over_budget']} files under "
            f"{', '.join(scan['roots'])} were not scanned; narrow the roots with --scan-root"
        )

"""No token-like strings anywhere a `docker pull` exposes: history, config ENV, labels, versions.txt."""

from __future__ import annotations

import re
from typing import Any

from imagebuild.verify.checks.support import expect, expectations, image_config, redact

EXP = expectations()
SECRET_RE = re.compile("|".join(f"(?:{p})" for p in EXP.secret_patterns))


def _scan(where: str, texts: list[tuple[str, str]]) -> None:
    found = []
    for name, text in texts:
        found += [f"{name}: {redact(text, m.start(), m.end())}" for m in SECRET_RE.finditer(text)]
    expect(
        not found,
        f"token-like strings in the image {where} (anyone who pulls the image can read them)",
        expected=f"no match of {' | '.join(EXP.secret_patterns)}",
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
    _scan(EXP.versions_file, [(f"{EXP.versions_file}:{n}", line) for n, line in enumerate(lines, 1)])

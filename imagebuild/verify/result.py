"""The outcome of a verify run: one CheckResult per check, a report for people, JSON for machines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Outcome = Literal["passed", "failed", "error", "skipped"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "error", "skipped")
# Failed checks first: they are what the reader came for.
_ORDER = {"error": 0, "failed": 1, "skipped": 2, "passed": 3}


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    name: str  # e.g. "test_version_line[MORI_REF]"
    group: str  # e.g. "versions"
    outcome: Outcome
    message: str = ""  # for failures: what was expected and what was found
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome in ("passed", "skipped")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "group": self.group,
            "outcome": self.outcome,
            "message": self.message,
            "duration_s": round(self.duration_s, 3),
        }


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    image: str
    image_id: str  # the identity (config digest); "" when the engine's store could not say it
    arch: str
    checks: tuple[CheckResult, ...]
    duration_s: float
    junit: str | None = None  # where the JUnit XML was written
    engine_id: str = ""  # what the engine calls the image, where that is not the identity

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def counts(self) -> dict[str, int]:
        return {o: sum(1 for c in self.checks if c.outcome == o) for o in OUTCOMES}

    def format_report(self) -> str:
        counts = self.counts()
        verdict = "PASSED" if self.passed else "FAILED"
        skipped = f", {counts['skipped']} skipped" if counts["skipped"] else ""
        head = (
            f"imagebuild verify {self.image} ({self._named}, arch {self.arch}): {verdict}, "
            f"{counts['passed']} passed, {counts['failed']} failed, {counts['error']} errors"
            f"{skipped} in {self.duration_s:.1f} s"
        )
        lines = [head]
        ordered = sorted(self.checks, key=lambda c: (_ORDER[c.outcome], c.group, c.name))
        for check in ordered:
            if check.ok:
                continue
            lines.append(f"  {check.outcome.upper():<6} {check.group}: {check.name}")
            lines.extend(f"         {line}" for line in (check.message or "(no message)").splitlines())
        if not self.checks:
            lines.append("  no checks ran")
        groups: dict[str, list[CheckResult]] = {}
        for check in self.checks:
            groups.setdefault(check.group, []).append(check)
        summary = ", ".join(
            f"{group} {sum(c.ok for c in items)}/{len(items)}" for group, items in sorted(groups.items())
        )
        if summary:
            lines.append(f"  checks by group (ok/total): {summary}")
        if self.junit:
            lines.append(f"  JUnit XML: {self.junit}")
        return "\n".join(lines) + "\n"

    @property
    def _named(self) -> str:
        if not self.image_id:
            return f"engine ID {self.engine_id[:19]}, identity unknown"
        return self.image_id[:19] + (f", engine ID {self.engine_id[:19]}" if self.engine_id else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "image_id": self.image_id or None,
            "engine_id": self.engine_id or self.image_id,
            "arch": self.arch,
            "passed": self.passed,
            "duration_s": round(self.duration_s, 3),
            "counts": self.counts(),
            "junit": self.junit,
            "checks": [c.to_json() for c in self.checks],
        }

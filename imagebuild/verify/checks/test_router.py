"""vllm-router: installed, executable, built from the branch with MoRIIO service discovery."""

from __future__ import annotations

from typing import Any

from imagebuild.verify.checks.support import expect, expectations

EXP = expectations()


def test_router_executable(facts: dict[str, Any]) -> None:
    router = facts["router"]
    found = "missing" if not router["exists"] else "present" if router["executable"] else "not executable"
    expect(
        router["exists"] and router["executable"], f"{EXP.router}", expected="an executable file", found=found
    )


def test_router_help_mentions_moriio(facts: dict[str, Any]) -> None:
    done = facts["router"]["help"]
    expect(done is not None, f"{EXP.router} --help", expected="runs", found="not executable")
    text = f"{done['stdout']}{done['stderr']}"
    expect(
        done["rc"] == 0 and EXP.router_help_word in text,
        f"{EXP.router} --help must mention {EXP.router_help_word} (the router branch with MoRIIO discovery)",
        expected=f"exit 0 and '{EXP.router_help_word}' in the help",
        found=f"exit {done['rc']}, {'mentions' if EXP.router_help_word in text else 'does not mention'} it: {text.strip()[-300:]}",
    )

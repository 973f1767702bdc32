"""vllm-router: installed, executable, built from the branch with MoRIIO service discovery."""

from __future__ import annotations

from typing import Any

from imagebuild.inputs.layout import ROUTER
from imagebuild.verify.checks.support import expect
from imagebuild.verify.image_facts import ROUTER_HELP_WORD


def test_router_executable(facts: dict[str, Any]) -> None:
    router = facts["router"]
    found = "missing" if not router["exists"] else "present" if router["executable"] else "not executable"
    expect(router["exists"] and router["executable"], f"{ROUTER}", expected="an executable file", found=found)


def test_router_help_mentions_moriio(facts: dict[str, Any]) -> None:
    done = facts["router"]["help"]
    expect(done is not None, f"{ROUTER} --help", expected="runs", found="not executable")
    text = f"{done['stdout']}{done['stderr']}"
    expect(
        done["rc"] == 0 and ROUTER_HELP_WORD in text,
        f"{ROUTER} --help must mention {ROUTER_HELP_WORD} (the router branch with MoRIIO discovery)",
        expected=f"exit 0 and '{ROUTER_HELP_WORD}' in the help",
        found=f"exit {done['rc']}, {'mentions' if ROUTER_HELP_WORD in text else 'does not mention'} it: {text.strip()[-300:]}",
    )

"""What a credential looks like, for refusing it before it reaches image history."""

from __future__ import annotations

import re

SECRET_NAME_RE = re.compile(r"TOKEN|SECRET|PASSW(OR)?D|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
SECRET_VALUE_RE = re.compile(
    r"ghp_[A-Za-z0-9]{8,}|gho_[A-Za-z0-9]{8,}|github_pat_[A-Za-z0-9_]{8,}|x-access-token|AKIA[0-9A-Z]{16}"
    r"|glpat-[A-Za-z0-9_-]{8,}|https?://[^/\s:@]+:[^/\s@]+@"
)


def secret_reason(name: str, value: str = "") -> str | None:
    """Why ``name=value`` looks like a credential, or None."""
    if SECRET_NAME_RE.search(name):
        return f"the name '{name}' looks like a secret"
    return value_secret_reason(value, f"the value of {name}")


def value_secret_reason(value: str, what: str = "the value") -> str | None:
    """Why ``value`` looks like it holds a credential, or None (for values whose name is not chosen by a user)."""
    match = SECRET_VALUE_RE.search(value)
    if match:
        return f"{what} contains a credential-like string ('{match[0][:12]}...')"
    return None


def secret_value_reason(value: str) -> str | None:
    """Why a value (a label, a record field) looks like a credential, or None; names are not judged."""
    match = SECRET_VALUE_RE.search(value)
    return f"contains a credential-like string ('{match[0][:12]}...')" if match else None

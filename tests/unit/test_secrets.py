"""The one secret detector: what it finds, and that a report of a finding never shows the secret."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imagebuild.secrets import CREDENTIAL_QUERY_PARAMS, SECRET_PATTERNS, find_secrets, redact, secret_reason

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

# A credential of each kind, as it appears in the wild, and the part that is the secret.
EXAMPLES: dict[str, tuple[str, str]] = {
    "GitHub token": ("ghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9),
    "GitHub fine-grained token": ("github_pat_11ABCDEFG0123456789_abcdefXYZ", "github_pat_11ABCDEFG0123456789_abcdefXYZ"),
    "GitLab token": ("glpat-" + "x" * 20, "glpat-" + "x" * 20),
    "AWS access key": ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    "Slack token": ("xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    "Hugging Face token": ("hf_" + "q" * 34, "hf_" + "q" * 34),
    "PyPI token": ("pypi-" + "AgEIcHlwaS5vcmc" * 4, "pypi-" + "AgEIcHlwaS5vcmc" * 4),
    "GitHub App token in a URL": ("https://x-access-token:v1.abc123@github.com/o/r", "v1.abc123"),
    "password in a URL": ("https://deploy:hunter2@example.com/r.git", "hunter2"),
    "token in a URL": ("https://abcdefghij0123456789xyz@example.com/r.git", "abcdefghij0123456789xyz"),
    "credential in a URL query": ("https://gitlab.com/api?private_token=s3cr3tvalue&x=1", "s3cr3tvalue"),
    "token variable": ("export GITHUB_TOKEN=plainsecretvalue", "plainsecretvalue"),
    "token variable in YAML": ("env:\n  HF_TOKEN: 'abcdefghijklmnopqrstuv'", "abcdefghijklmnopqrstuv"),
}  # fmt: skip


def test_every_pattern_has_an_example() -> None:
    assert {p.kind for p in SECRET_PATTERNS} == set(EXAMPLES)


@pytest.mark.parametrize("kind", EXAMPLES)
def test_each_kind_is_found_and_shown_redacted(kind: str) -> None:
    text, secret = EXAMPLES[kind]
    line = f"some context before {text} and after"
    findings = find_secrets(line)
    assert findings, kind
    assert any(line[f.start : f.end] == secret for f in findings), findings
    for f in findings:
        assert secret not in f.shown
        assert f"<redacted {f.end - f.start} chars>" in f.shown
    assert secret not in redact(line)
    assert "<redacted>" in redact(line)


def _percent_encoded(text: str) -> str:
    return "".join(f"%{byte:02X}" for byte in text.encode())


ENCODINGS = {
    "base64": lambda text: base64.b64encode(text.encode()).decode(),
    "URL-safe base64": lambda text: base64.urlsafe_b64encode(b"\xfb\xff" + text.encode()).decode(),
    "base64 of user:token (docker's auth)": lambda text: base64.b64encode(f"deploy:{text}".encode()).decode(),
    "URL-encoded": _percent_encoded,
}


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("kind", EXAMPLES)
def test_an_encoded_credential_is_found_and_the_whole_encoding_redacted(kind: str, encoding: str) -> None:
    encoded = ENCODINGS[encoding](EXAMPLES[kind][0])
    line = f'{{"auths": {{"registry.example.org": {{"auth": "{encoded}"}}}}}}'
    findings = find_secrets(line)
    assert [f.kind for f in findings] == [f"{kind}, {'URL' if encoding == 'URL-encoded' else 'base64'}-encoded"]
    assert line[findings[0].start : findings[0].end] == encoded
    assert encoded not in findings[0].shown
    assert redact(line) == '{"auths": {"registry.example.org": {"auth": "<redacted>"}}}'


@pytest.mark.parametrize(
    "text",
    [
        base64.b64encode(b"an ordinary sentence, base64-encoded for transport").decode(),
        "MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJRTESMBAGA1UE",  # a certificate line
        "/usr/local/lib/python3.12/dist-packages/aiter/jit/build",
        "https://h/a%20wheel-1-py3-none-any.whl",
    ],
)
def test_encoded_ordinary_text_is_not_a_secret(text: str) -> None:
    assert find_secrets(text) == []


def test_query_parameters_match_case_insensitively() -> None:
    assert "x-amz-signature" in CREDENTIAL_QUERY_PARAMS
    assert find_secrets("https://b.s3.amazonaws.com/k?X-Amz-Signature=abcdef0123")
    assert find_secrets("https://acct.blob.core.windows.net/c/b?sv=2020&SIG=abcdef0123")


@pytest.mark.parametrize(
    "text",
    [
        "git@github.com:org/repo.git",
        "https://github.com/ROCm/mori.git",
        "PIP_CONSTRAINT=/etc/pip-constraints.txt",
        "MORI_REF=fe12a11a7d6c6acd0771b772366ed9ed5e0d3d44",
        "sha256:" + "a" * 64,
        "GH_TOKEN is read from the environment",
        "--build-arg GH_TOKEN: refused, the name looks like a secret",  # prose, not an assignment
        "https://user@example.com/x",  # a user name is not a credential
        "registry.example.com/ml/kimi-k3:gfx942@sha256:" + "a" * 64,  # a tag and a digest
        "ubuntu:22.04@sha256:" + "0" * 64,
        "git+https://github.com/org/repo@v1.0",
        "<a href='mailto:maintainer@example.org'>",
        "y = x[1:n]@w/2",  # code, not user info
        # Free text in the files verify scans, where word:word@host is rarely a password: pip's own
        # docstring, XMPP and e-mail links (the reference grammar alone tells, in inputs.references).
        '- "user:pass@example.com" returns "user:****@example.com"',
        "xmpp:fred@example.org",
        '"http:\\/\\/api.launchpad.dev\\/beta\\/~carlos\\/+email\\/carlos@canonical.com"',
    ],
)
def test_ordinary_build_text_is_not_a_secret(text: str) -> None:
    assert find_secrets(text) == []


def test_names_that_say_secret_are_refused_whatever_the_value() -> None:
    assert secret_reason("GH_TOKEN", "") == "the name 'GH_TOKEN' looks like a secret"
    assert secret_reason("MAX_JOBS", "32") is None
    reason = secret_reason("MAX_JOBS", "ghp_" + "z" * 36)
    assert reason is not None
    assert "z" * 8 not in reason


secrets_ = st.sampled_from(list(EXAMPLES.values()))
noise = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)


@given(before=noise, example=secrets_, after=noise, twice=st.booleans())
def test_a_report_never_shows_the_secret(
    before: str, example: tuple[str, str], after: str, twice: bool
) -> None:
    text, secret = example
    doc = f"{before} {text} {after}" + (f" {text}" if twice else "")
    shown = " ".join(f.shown for f in find_secrets(doc))
    assert find_secrets(doc), doc
    # Neither the whole secret nor any long piece of it survives in a report or a redacted text.
    pieces = {secret[i : i + 12] for i in range(max(1, len(secret) - 11))}
    for piece in pieces:
        if piece in before or piece in after:
            continue  # the noise happened to contain it
        assert piece not in shown
        assert piece not in redact(doc)


def test_the_logger_redacts_what_its_messages_quote(capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuild.log import logger, setup_logging

    setup_logging(0)
    token = "ghp_" + "L0g" * 12
    logger.info("cloning https://ci:%s@github.com/org/repo.git", token)
    err = capsys.readouterr().err
    assert err == "cloning https://ci:<redacted>@github.com/org/repo.git\n"

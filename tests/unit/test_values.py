"""Each kind of value: what it accepts and refuses, and how values are quoted where they land."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imagebuild.errors import ConfigError
from imagebuild.inputs.values import (
    ABSOLUTE_PATH,
    ABSOLUTE_PATH_TEMPLATE,
    COMMIT,
    CONTEXT_PATH,
    CONTROL_RE,
    ENV_VALUE,
    FILE_NAME,
    GIT_REF,
    GIT_URL,
    HASH_LOCKED_INSTALL,
    HTTPS_URL,
    IMAGE_NAME,
    IMAGE_REFERENCE,
    IMAGE_TAG,
    NETWORK_MODE,
    PIN_NAME,
    PROJECT_NAME,
    PYTHON_VERSION,
    TEXT,
    TOOLCHAIN_VERSION,
    TUNABLE,
    VERSION,
    Kind,
    control_problem,
    dockerfile_literal,
    escape_controls,
    quoted_template,
    shell_word,
)
from imagebuild.secrets import redact

CONTROLS = ["\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u2029", "\u202e", "\udcff", "\t"]

ACCEPTED: dict[str, tuple[Kind, list[str]]] = {
    "commit": (COMMIT, ["fe12a11a7d6c6acd0771b772366ed9ed5e0d3d44"]),
    "python": (PYTHON_VERSION, ["3.12", "3.9"]),
    "version": (VERSION, ["0.2.4", "0.1.19", "1.0rc1", "2.0.post1", "0.1.19+rocm7.2"]),
    "toolchain": (TOOLCHAIN_VERSION, ["1.88.0"]),
    "project": (PROJECT_NAME, ["flydsl", "amd-aiter", "Zope.Interface", "a"]),
    "file": (
        FILE_NAME,
        ["flydsl-0.2.4-cp312-cp312-manylinux_2_27_x86_64.whl", "amd_aiter-0.1.19+rocm7.2.whl"],
    ),
    "image": (IMAGE_NAME, ["rocm/vllm-dev", "127.0.0.1:55000/rocm/vllm-dev", "ubuntu", "[::1]:5000/a/b"]),
    "tag": (IMAGE_TAG, ["ci_base-0fcd9b99cc9d63202da4c858d8ebc6582c9e2491", "v2", "latest"]),
    "reference": (
        IMAGE_REFERENCE,
        [
            "imagebuild/kimi-k3:gfx942",
            "a/b@sha256:" + "0" * 64,
            "sha256:" + "a" * 64,
            "127.0.0.1:5000/a/b:v1",
            "localhost:5000/a",
            "0123456789ab",
        ],
    ),
    "network": (NETWORK_MODE, ["host", "bridge", "none", "container:abc"]),
    "git ref": (GIT_REF, ["v1.2.2", "ravgupta/discovery-dp-rank-roundrobin", "kimi-k3-wideep-v3"]),
    "tunable": (TUNABLE, ["32", "0", "", "gfx90a;gfx942", "cx7", "a=b,c:d/e@f%g+h"]),
    "path": (ABSOLUTE_PATH, ["/tmp/mori", "/usr/local/lib/python3.12/dist-packages", "/"]),
    "path template": (ABSOLUTE_PATH_TEMPLATE, ["${DONOR_SITE_PACKAGES}/aiter", "/opt/x/", "${A}"]),
    "context path": (CONTEXT_PATH, ["rootfs/", "launcher/", "a/b"]),
    "env value": (ENV_VALUE, ["OFF", "/opt/ucx/lib:${LD_LIBRARY_PATH}", "a b; c & (d) 'e' #f *"]),
    "https url": (
        HTTPS_URL,
        [
            "https://pypi.org/simple/",
            "https://github.com/ROCm/aiter/releases/download/v0.1.19/amd_aiter-0.1.19%2Brocm7.2.whl",
            "http://127.0.0.1:55080/simple/",
            "http://localhost/x",
            "http://[::1]:8080/x",
            "https://h/a$b(c)'d';e",
        ],
    ),
    "git url": (GIT_URL, ["https://github.com/ROCm/mori.git", "git://127.0.0.1:55418/ROCm/mori.git"]),
    "pin name": (PIN_NAME, ["aiter", "flydsl", "base_2"]),
    "hash-locked install": (
        HASH_LOCKED_INSTALL,
        ["install", "install --force-reinstall", "install --no-compile --upgrade"],
    ),
}

REFUSED: dict[str, tuple[Kind, list[str], str]] = {
    "short commit": (COMMIT, ["fe12a11", "FE12A11A7D6C6ACD0771B772366ED9ED5E0D3D44"], "commit SHA"),
    "python": (PYTHON_VERSION, ["3", "3.12.1", "latest", "three", "3.x", " 3.12"], "MAJOR.MINOR"),
    "version": (VERSION, ["latest", "", "1.0 ", "v1.0", "==1.0", "1.0;rm", "1,0"], "release version"),
    "toolchain": (TOOLCHAIN_VERSION, ["stable", "1.88", "1.88.0; rm -rf /"], "toolchain version"),
    "project": (PROJECT_NAME, ['flydsl"; touch /x; "', "fly dsl", "-x", "x-", "a$b", ""], "project name"),
    "file": (FILE_NAME, ["../x.whl", "a/b.whl", "-x.whl", ".hidden", "a b.whl", 'x".whl'], "file name"),
    "image": (
        IMAGE_NAME,
        ["Rocm/Vllm", "rocm/vllm:tag", "a b", "user:pw@host/x", "Upper/case"],
        "image name",
    ),
    "tag": (IMAGE_TAG, ["-x", "a b", "x" * 129, "a;b"], "docker tag"),
    "reference": (
        IMAGE_REFERENCE,
        ["Upper/case", "a b", "x:tag with space", "--rm", "a:b:c", "x@sha256:12", "x:-t"],
        "image reference",
    ),
    "network": (NETWORK_MODE, ["host; rm", "a b", "-x"], "network mode"),
    "git ref": (
        GIT_REF,
        ["-upload-pack=x", "a..b", "a/", "/a", "x.lock", "a//b", "a/.b", "a b", "a~1"],
        "git",
    ),
    "tunable": (TUNABLE, ["1 2", "$(x)", "`x`", "a*", "a?", "[a]", "'a'", '"a"', "a\\b", "${X}"], "tunable"),
    "path": (
        ABSOLUTE_PATH,
        ["tmp/x", "/tmp/x y", "/tmp/../etc", "/tmp/$(x)", "/tmp/x;y", "/tmp/'x'"],
        "path",
    ),
    "context path": (CONTEXT_PATH, ["/abs", "../up", "a/../b", "a b"], "path"),
    "env value": (ENV_VALUE, ['a"b', "a\\b", "`x`", "$(x)", "$HOME", "a$"], "outside a ${NAME}"),
    "pin name": (PIN_NAME, ["Aiter", "a-b", "1a", "a b", "a;b", ""], "pin name"),
    "hash-locked install": (
        HASH_LOCKED_INSTALL,
        [
            "install tqdm",
            "install -r /x",
            "install --target=/x",
            "install ; touch /x",
            "download",
            "install  --x",
        ],
        "long pip options",
    ),
    "hash-locked install with a source": (
        HASH_LOCKED_INSTALL,
        ["install --index-url", "install --extra-index-url", "install --find-links", "install --editable"],
        "adds a package source",
    ),
}

URL_REFUSED = {
    "plain http to a real host": ("http://github.com/x", "not loopback"),
    "git:// to a real host": ("git://github.com/x.git", "not loopback"),
    "ftp": ("ftp://127.0.0.1/x", "://HOST"),
    "file": ("file:///etc/passwd", "://HOST"),
    "no host": ("https:///x", "://HOST"),
    "user and password": ("https://user:pass@host/x", "credentials"),
    "token-only user info": ("https://ghp_abcdefghijklmnopqrstuvwxyz@github.com/x", "credentials"),
    "bare user": ("https://user@host/x", "credentials"),
    "token query": ("https://host/x?token=abc", "token=..."),
    "gitlab private token": ("https://host/x?private_token=abc", "private_token"),
    "presigned S3": ("https://bucket.s3.amazonaws.com/x?X-Amz-Signature=abc&X-Amz-Credential=y", "x-amz-"),
    "Azure SAS": ("https://acct.blob.core.windows.net/c/x.whl?sv=1&sig=abc", "sig"),
    "token in the path": ("https://host/ghp_abcdefghijklmnopqrstuvwxyz/x.whl", "credential-like"),
    "space": ("https://host/a b", "%-encoded"),
    "quote": ('https://host/a"b', "%-encoded"),
    "bad port": ("https://host:99999/x", "Port out of range"),
}


@pytest.mark.parametrize("case", ACCEPTED)
def test_kind_accepts(case: str) -> None:
    kind, values = ACCEPTED[case]
    for value in values:
        assert kind.check(value, "f.toml [p]", "key") == value


@pytest.mark.parametrize("case", REFUSED)
def test_kind_refuses_naming_file_key_and_value(case: str) -> None:
    kind, values, words = REFUSED[case]
    for value in values:
        with pytest.raises(ConfigError) as e:
            kind.check(value, "f.toml [p]", "key")
        message = str(e.value)
        # The value as given, credentials redacted ('user:pw@host/x' -> '<redacted>@host/x').
        assert message.startswith(f"f.toml [p]: 'key' = {redact(value)[:60]!r}"[:40]), message
        assert words in message, message
        assert "\n" not in message


@pytest.mark.parametrize("case", URL_REFUSED)
def test_url_rules(case: str) -> None:
    url, words = URL_REFUSED[case]
    with pytest.raises(ConfigError, match="'url'") as e:
        GIT_URL.check(url, "pins.toml [aiter]", "url")
    assert words in str(e.value)


def test_urls_never_print_the_credential_they_refuse() -> None:
    token = "ghp_" + "S3cr3t" * 6
    with pytest.raises(ConfigError) as e:
        GIT_URL.check(f"https://example.com/{token}/r.git", "pins.toml [mori]", "url")
    # The value is shown so the user finds it; the secret's tail never is, beyond the 80-char cut.
    assert "credential-like" in str(e.value)


@pytest.mark.parametrize("char", CONTROLS)
@pytest.mark.parametrize("kind", [TEXT, TUNABLE, ENV_VALUE, HTTPS_URL, ABSOLUTE_PATH, VERSION])
def test_control_characters_are_refused_by_every_kind(kind: Kind, char: str) -> None:
    with pytest.raises(ConfigError, match="control character") as e:
        kind.check(f"a{char}b", "f.toml", "key")
    assert CONTROL_RE.search(str(e.value)) is None  # the message itself stays on one line


def test_overlong_values_are_refused() -> None:
    assert control_problem("x" * 5000) == "is 5000 characters long (at most 4096)"


@given(st.text())
def test_escape_controls_keeps_a_message_on_one_line(text: str) -> None:
    assert CONTROL_RE.search(escape_controls(text)) is None


# Values a stage may expand unquoted: they never split into words or glob.
UNQUOTED_KINDS = [TUNABLE, VERSION, TOOLCHAIN_VERSION, PYTHON_VERSION, ABSOLUTE_PATH, FILE_NAME, PROJECT_NAME]


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=20), st.sampled_from(UNQUOTED_KINDS))
def test_values_used_unquoted_never_split_or_glob(value: str, kind: Kind) -> None:
    try:
        kind.check(value, "f", "k")
    except ConfigError:
        return
    assert not set(value) & set(" \t*?[]'\"\\$`(){}<>|&;!#~") - (set(";") if kind is TUNABLE else set())


def test_quoting_functions() -> None:
    assert dockerfile_literal('a\\b"c$d') == '"a\\\\b\\"c\\$d"'
    assert quoted_template('/x:${PATH} "q"') == '"/x:${PATH} \\"q\\""'
    assert shell_word('$(rm -rf /) `x` "y" \\') == '"\\$(rm -rf /) \\`x\\` \\"y\\" \\\\"'

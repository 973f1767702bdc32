"""Stand-in git repositories with deterministic history, written with `git fast-import`.

Author, committer, tagger and dates are fixed, and trees are built from sampleworld/sources/ with fixed
modes, so every commit and tag SHA is the same on every machine and run (sampleworld/pins.toml relies on
it). Each repository gets a short history so tags, branches and a moved default branch all exist.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sampleworld import proc
from sampleworld.layout import SOURCES_DIR, WORLD_VERSION

IDENT = "Sample World <sampleworld@imagebuild.invalid>"
EPOCH = 1767225600  # 2026-01-01T00:00:00Z; commit n is dated EPOCH + n hours
_SKIP_DIRS = {"__pycache__", "target", ".git"}


@dataclass(frozen=True, kw_only=True)
class Commit:
    label: str
    message: str
    source: str  # directory under sampleworld/sources/
    parent: str | None = None  # label of the parent commit
    # (path, old, new): text substitutions on the source files, to give older commits older contents.
    edits: tuple[tuple[str, str, str], ...] = ()
    extra: Mapping[str, str] = field(default_factory=dict)  # path -> content added on top
    # path -> (repository, branch): a submodule entry pointing at that repository's branch head.
    gitlinks: Mapping[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RepoSpec:
    path: str  # below the daemon's base path, e.g. "ROCm/mori.git"
    commits: tuple[Commit, ...]
    branches: Mapping[str, str]  # branch -> commit label
    tags: Mapping[str, str] = field(default_factory=dict)  # annotated tag -> commit label
    head: str = "main"


_MORI_OLD = (("setup.py", 'version="1.2.2"', 'version="1.2.1"'), ("mori/__init__.py", '"1.2.2"', '"1.2.1"'))
_VLLM_OLD = (
    ("setup.py", 'version="0.11.1+k3.wideep"', 'version="0.11.0"'),
    ("vllm/__init__.py", '"0.11.1+k3.wideep"', '"0.11.0"'),
)
_ROUTER_OLD = (
    ("src/main.rs", "      --service-discovery <KIND>    Worker discovery: static | moriio\n", ""),
    ("src/main.rs", "      --moriio-port <PORT>          MoRIIO discovery port [default: 36367]\n", ""),
    ("src/main.rs", "round_robin | dp_rank_round_robin", "round_robin"),
)
# A later router commit on a branch of its own: a pin change whose effect on the image is known
# exactly (the router binary and its versions.txt line), for the reproducibility tests.
_ROUTER_NEXT = (
    (
        "src/main.rs",
        "      --moriio-port <PORT>          MoRIIO discovery port [default: 36367]\n",
        "      --moriio-port <PORT>          MoRIIO discovery port [default: 36367]\n"
        "      --moriio-timeout <SECS>       Wait this long for MoRIIO peers [default: 30]\n",
    ),
)
_UMBP = {"3rdparty/umbp": ("ROCm/mori-3rdparty.git", "main")}
# The NIXL layer's stand-ins (sources/nixl/): one commit each, DeepEP's default branch one ahead
# so resolving its HEAD is a real resolution (the reference builds DeepEP's default branch).
_NIXL_REPOS = (
    RepoSpec(
        path="ROCm/ucx.git",
        commits=(Commit(label="c1", message="UCX (ROCm) stand-in", source="nixl/ucx"),),
        branches={"master": "c1"},
        head="master",
    ),
    RepoSpec(
        path="ROCm/RIXL.git",
        commits=(Commit(label="c1", message="RIXL stand-in: NIXL agent over UCX", source="nixl/rixl"),),
        branches={"main": "c1"},
    ),
    RepoSpec(
        path="ROCm/rocm-systems.git",
        commits=(
            Commit(
                label="c1", message="rocm-systems stand-in: projects/rocshmem", source="nixl/rocm-systems"
            ),
        ),
        branches={"develop": "c1"},
        head="develop",
    ),
    RepoSpec(
        path="ROCm/DeepEP.git",
        commits=(
            Commit(
                label="c1",
                message="DeepEP stand-in",
                source="nixl/deepep",
                edits=(("deep_ep.h", "#endif", "#endif /* initial */"),),
            ),
            Commit(
                label="c2",
                message="DeepEP stand-in: build against rocSHMEM",
                source="nixl/deepep",
                parent="c1",
            ),
        ),
        branches={"main": "c2"},
    ),
)

# Ordered: a repository is built after those its submodules point at.
REPOS: tuple[RepoSpec, ...] = (
    RepoSpec(
        path="ROCm/mori-3rdparty.git",
        commits=(Commit(label="c1", message="UMBP third-party sources 0.3.0", source="mori-3rdparty"),),
        branches={"main": "c1"},
    ),
    RepoSpec(
        path="ROCm/mori.git",
        commits=(
            Commit(label="c1", message="MoRI 1.2.1", source="mori", edits=_MORI_OLD, gitlinks=_UMBP),
            Commit(label="c2", message="MoRI 1.2.2", source="mori", parent="c1", gitlinks=_UMBP),
            Commit(
                label="c3",
                message="Start 1.2.3 development",
                source="mori",
                parent="c2",
                gitlinks=_UMBP,
                extra={"CHANGELOG.md": "# Changelog\n\n## 1.2.3 (unreleased)\n\n- nothing yet\n"},
            ),
        ),
        branches={"main": "c3"},
        tags={"v1.2.1": "c1", "v1.2.2": "c2"},
    ),
    RepoSpec(
        path="raviguptaamd/vllm.git",
        commits=(
            Commit(label="c1", message="Upstream vLLM 0.11.0", source="vllm", edits=_VLLM_OLD),
            Commit(
                label="c2",
                message="Upstream: document the ROCm build",
                source="vllm",
                parent="c1",
                edits=_VLLM_OLD,
                extra={"docs/rocm.md": "# ROCm\n\nSet PYTORCH_ROCM_ARCH to the one target you build for.\n"},
            ),
            Commit(
                label="c3",
                message="Kimi-K3 wide-EP disaggregation: MoRIIO connector fixes",
                source="vllm",
                parent="c1",
            ),
        ),
        branches={"main": "c2", "kimi-k3-wideep-disagg-fullsource-v3": "c3"},
    ),
    RepoSpec(
        path="raviguptaamd/router.git",
        commits=(
            Commit(label="c1", message="vllm-router 0.1.0", source="router", edits=_ROUTER_OLD),
            Commit(
                label="c2",
                message="Discovery: dp-rank round robin and MoRIIO service discovery",
                source="router",
                parent="c1",
            ),
            Commit(
                label="c3",
                message="Discovery: --moriio-timeout for slow MoRIIO peers",
                source="router",
                parent="c2",
                edits=_ROUTER_NEXT,
            ),
        ),
        branches={
            "main": "c1",
            "ravgupta/discovery-dp-rank-roundrobin": "c2",
            "ravgupta/moriio-timeout": "c3",
        },
    ),
    *_NIXL_REPOS,
)


def _source_files(source: str) -> dict[str, bytes]:
    root = SOURCES_DIR / source
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and not _SKIP_DIRS.intersection(relative.parts) and path.suffix != ".pyc":
            files[relative.as_posix()] = path.read_bytes()
    return files


def _tree(commit: Commit) -> dict[str, bytes]:
    files = _source_files(commit.source)
    for path, old, new in commit.edits:
        text = files[path].decode()
        if old not in text:
            msg = f"edit of {commit.source}/{path} in commit {commit.label!r}: {old!r} not found"
            raise ValueError(msg)
        files[path] = text.replace(old, new).encode()
    for path, content in commit.extra.items():
        files[path] = content.encode()
    return files


def _data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def _stream(spec: RepoSpec, heads: Mapping[tuple[str, str], str]) -> bytes:
    """The fast-import stream of one repository; `heads` resolves submodule gitlinks."""
    out: list[bytes] = []
    marks = {c.label: n for n, c in enumerate(spec.commits, start=1)}
    for n, commit in enumerate(spec.commits, start=1):
        when = f"{EPOCH + n * 3600} +0000"
        if commit.parent is None:
            out.append(b"reset refs/sampleworld/build\n")
        out.append(b"commit refs/sampleworld/build\nmark :%d\n" % n)
        out.append(f"author {IDENT} {when}\ncommitter {IDENT} {when}\n".encode())
        out.append(_data(f"{commit.message}\n".encode()))
        if commit.parent is not None:
            out.append(b"from :%d\n" % marks[commit.parent])
        out.append(b"deleteall\n")
        for path, content in sorted(_tree(commit).items()):
            out.append(f"M 100644 inline {path}\n".encode() + _data(content))
        for path, (repo, branch) in sorted(commit.gitlinks.items()):
            out.append(f"M 160000 {heads[(repo, branch)]} {path}\n".encode())
    for branch, label in spec.branches.items():
        out.append(f"reset refs/heads/{branch}\nfrom :{marks[label]}\n\n".encode())
    for tag, label in spec.tags.items():
        when = f"{EPOCH + marks[label] * 3600 + 60} +0000"
        out.append(f"tag {tag}\nfrom :{marks[label]}\ntagger {IDENT} {when}\n".encode())
        out.append(_data(f"Release {tag}\n".encode()))
    return b"".join(out)


def fingerprint() -> str:
    """Changes whenever any repository would come out different."""
    digest = hashlib.sha256(WORLD_VERSION.encode())
    for spec in REPOS:
        digest.update(repr(spec).encode())
        for source in sorted({c.source for c in spec.commits}):
            for path, content in _source_files(source).items():
                digest.update(f"{source}/{path}\0{len(content)}\0".encode() + content)
    return digest.hexdigest()


def build_repos(base: Path) -> dict[str, dict[str, str]]:
    """(Re)create every bare repository under `base`; returns {repo path: {ref: commit SHA}}."""
    heads: dict[tuple[str, str], str] = {}
    refs: dict[str, dict[str, str]] = {}
    for spec in REPOS:
        repo = base / spec.path
        if repo.exists():
            shutil.rmtree(repo)
        repo.parent.mkdir(parents=True, exist_ok=True)
        proc.run(["git", "init", "--quiet", "--bare", f"--initial-branch={spec.head}", str(repo)])
        proc.run(
            ["git", "fast-import", "--quiet", "--done"], cwd=repo, stdin=_stream(spec, heads) + b"done\n"
        )
        proc.run(["git", "update-ref", "-d", "refs/sampleworld/build"], cwd=repo)
        # Blobless clones (--filter=blob:none) and fetching a bare SHA need these on the serving side.
        proc.run(["git", "config", "uploadpack.allowFilter", "true"], cwd=repo)
        proc.run(["git", "config", "uploadpack.allowAnySHA1InWant", "true"], cwd=repo)
        listing = proc.run(
            ["git", "for-each-ref", "--format=%(refname) %(objectname) %(*objectname)"], cwd=repo
        )
        repo_refs: dict[str, str] = {}
        for line in listing.splitlines():
            name, obj, peeled = ([*line.split(), ""])[:3]
            repo_refs[name] = peeled or obj  # a tag maps to the commit it points at
            if name.startswith("refs/heads/"):
                heads[(spec.path, name.removeprefix("refs/heads/"))] = obj
        refs[spec.path] = repo_refs
    return refs

"""Facts of the image's layout and the tool's defaults, defined once.

Paths inside the image are shared by the renderer (stages, pip constraint),
the build context (where the in-image files land), verify (what it looks
for) and the CLI (defaults). Stage files reach the in-image paths by name:
``${VERSIONS_FILE}`` in a stage is replaced by ``/app/versions.txt`` when the
stages are loaded (see :data:`STAGE_NAMES`), so the rendered Dockerfile
carries the literal path and a path changes here, not in eighteen files.
"""

from __future__ import annotations

from pathlib import Path

# Inside the image ------------------------------------------------------------

APP_DIR = "/app"  # the final stage's WORKDIR
VERSIONS_FILE = f"{APP_DIR}/versions.txt"  # one line per source that went in
# What apt and Python installed: step 17 runs `imagebuild-check record-packages APP_DIR`, which
# writes these two names (image_files/imagebuild_check.py runs in the image, without imagebuild).
APT_PACKAGES_FILE = f"{APP_DIR}/apt-packages.txt"
PYTHON_PACKAGES_FILE = f"{APP_DIR}/python-packages.txt"
CONSTRAINT_FILE = "/etc/pip-constraints.txt"  # the build-toolchain constraint (constraints/*.txt)
# What pip's isolated builds get: the constraint plus the locked build dependencies' exact versions.
BUILD_CONSTRAINT_FILE = "/etc/pip-build-constraints.txt"
IMAGEBUILD_DIR = "/opt/imagebuild"
CHECK_TOOL = f"{IMAGEBUILD_DIR}/bin/imagebuild-check"  # image_files/imagebuild_check.py
PROBE_DIR = f"{IMAGEBUILD_DIR}/probe"  # the constraint probe sdist (image_files/probe)
LAUNCHER_DIR = f"{IMAGEBUILD_DIR}/launcher"  # the serve launcher and its recipes
LAUNCHER = f"{LAUNCHER_DIR}/serve.py"
ROUTER = "/usr/local/bin/vllm-router"
# Where a cluster job mounts host directories in the container: the shared log dir (the launcher's
# LOG_ROOT default), the JIT caches, and the model where the runtime cannot mount it at its host path.
# A squashfs is read-only and ch-run cannot make a bind's destination in it, so `export --format
# squashfs` adds these as empty directories where the image has nothing.
LOG_MOUNT = "/run_logs"
MODEL_MOUNT = f"{IMAGEBUILD_DIR}/model"
# The image runs as root (no USER): HOME is /root under docker and podman, and MoRI keeps its JIT
# under HOME. ch-run passes the task's own HOME through, which the image lacks, so its job (and pyxis's,
# whose home is not mounted) sets this one.
IMAGE_HOME = "/root"
VLLM_CACHE_MOUNT = "/opt/vllm_cache"  # AITER, vLLM, Triton, COMGR
MORI_JIT_MOUNT = f"{IMAGE_HOME}/.mori"
JIT_CACHE_MOUNTS = (VLLM_CACHE_MOUNT, MORI_JIT_MOUNT)
MOUNT_POINTS = (LOG_MOUNT, MODEL_MOUNT, *JIT_CACHE_MOUNTS)
# What step 10 installs with WITH_NIXL=1 (the reference's /usr/local/ucx and /usr/local/RIXL/install;
# rocSHMEM's and DeepEP's file names are the sample stand-ins', unverified against the real builds).
NIXL_LIBRARIES = (
    "/usr/local/ucx/lib/libucp.so",
    "/usr/local/RIXL/install/lib/libnixl.so",
    "/usr/local/lib/librocshmem.so",
    "/usr/local/lib/libdeep_ep.so",
)

# The compile cache (imagebuild.build.compile_cache): a pip build a stage marks `compile_cache = true`
# (steps 4 and 7) always gives ccache this remote storage, on the build host's loopback (builds run with
# --network host), and only that ("remote only": nothing of ccache's lands in a layer; CCACHE_DIR holds
# its stats and is removed in the same RUN, and verify checks it is gone). It is given under both of
# ccache's names for it: remote (4.7+) and secondary (4.4-4.6, which have no remote_only and keep their
# entries in CCACHE_DIR, removed all the same).
# Nothing answers there unless `imagebuild build --compile-cache` serves a cache for the build, so the
# Dockerfile and the image are the same with and without one. The port is outside Linux's ephemeral
# range (32768-60999), so an outgoing connection never holds it.
COMPILE_CACHE_PORT = 27485
COMPILE_CACHE_URL = f"http://127.0.0.1:{COMPILE_CACHE_PORT}/ccache"
CCACHE_DIR = "/tmp/ccache"
# What `compile_cache = true` adds to the pip build's environment, after the stage's own variables.
COMPILE_CACHE_ENV = (
    ("CCACHE_REMOTE_STORAGE", COMPILE_CACHE_URL),
    ("CCACHE_SECONDARY_STORAGE", COMPILE_CACHE_URL),
    ("CCACHE_REMOTE_ONLY", "true"),
    ("CCACHE_DIR", CCACHE_DIR),
)

# Names stage files may use for the paths above; replaced when the stages are loaded.
STAGE_NAMES: dict[str, str] = {
    "APP_DIR": APP_DIR,
    "VERSIONS_FILE": VERSIONS_FILE,
    "CONSTRAINT_FILE": CONSTRAINT_FILE,
    "BUILD_CONSTRAINT_FILE": BUILD_CONSTRAINT_FILE,
    "CHECK_TOOL": CHECK_TOOL,
    "PROBE_DIR": PROBE_DIR,
    "LAUNCHER_DIR": LAUNCHER_DIR,
    "CCACHE_DIR": CCACHE_DIR,
}

# Where verify looks for credentials in the image's files and in every layer's (configurable: verify
# --scan-root), and the largest file it reads: text that matters (configs, scripts, .netrc) is small.
# /tmp and /home: where a build clones with a token and a user's config keeps one.
SECRET_SCAN_ROOTS = ("/app", "/etc", "/root", "/home", "/opt", "/tmp", "/usr/local/etc")
SECRET_SCAN_MAX_FILE_BYTES = 1024 * 1024

# The build context ------------------------------------------------------------

# `imagebuild render` writes one self-contained context per arch: docker/<arch>/ holds the
# Dockerfile and every file it COPYs, so `docker build docker/<arch>` needs nothing else.
DOCKER_DIR = "docker"
# Build-context directories the COPY steps read, and where they land.
CONTEXT_ROOTFS = "rootfs"  # copied to / (step 3)
CONTEXT_LAUNCHER = "launcher"  # copied to LAUNCHER_DIR (step 18)

# Labels ----------------------------------------------------------------------

OCI_LABEL_PREFIX = "org.opencontainers.image."
OCI_LABELS = ("source", "revision", "created", "version")
PIN_LABEL_PREFIX = "io.imagebuild.pin."
ARCH_LABEL = "io.imagebuild.arch"
VERSION_LABEL = "io.imagebuild.version"
# The SBOM's arch-wide name (sbom_file_name): a label is fixed before the build, so it cannot carry the
# identity the SBOM's file name has (attestation_file_name); `ARCH-<id12>.sbom.cdx.json` beside the record.
SBOM_LABEL = "io.imagebuild.sbom"
INPUTS_LABEL = "io.imagebuild.inputs-digest"  # sha256 of the build context without its label block
# The checkout's facts cannot live in a committed Dockerfile (its own commit is not known when it is
# written): each such label takes its value from a build ARG that `imagebuild build` passes.
CHECKOUT_LABEL_ARGS: dict[str, str] = {
    f"{OCI_LABEL_PREFIX}source": "IMAGEBUILD_SOURCE",
    f"{OCI_LABEL_PREFIX}revision": "IMAGEBUILD_REVISION",
    f"{OCI_LABEL_PREFIX}created": "IMAGEBUILD_CREATED",
    f"{OCI_LABEL_PREFIX}version": "IMAGEBUILD_VERSION",
}
CHECKOUT_LABEL_DEFAULT = "unknown"  # what a plain `docker build` without those build args records

# Defaults of the tool ----------------------------------------------------------

DEFAULT_ARCH = "gfx942"
DEFAULT_REPOSITORY = "imagebuild/kimi-k3"
LAUNCHER_RECIPE = "kimi-k3"  # the recipe verify dry-runs the launcher with
BUILD_DIR = "build"  # in the checkout: build records and logs


def context_dir(root: Path, arch: str) -> Path:
    """The committed build context of ``arch`` in the checkout at ``root``."""
    return root / DOCKER_DIR / arch


def default_tag(arch: str) -> str:
    return f"{DEFAULT_REPOSITORY}:{arch}"


def sbom_file_name(arch: str) -> str:
    """What the image's SBOM label holds: the SBOM's kind and arch (the file also names the identity)."""
    return f"{arch}.sbom.cdx.json"


SBOM_SUFFIX = ".sbom.cdx.json"
PROVENANCE_SUFFIX = ".provenance.intoto.json"


def attestation_file_name(arch: str, identity: str, suffix: str) -> str:
    """``gfx942-<identity, 12 hex><suffix>``: one image's document, never another image's of the same arch."""
    return f"{arch}-{identity.removeprefix('sha256:')[:12]}{suffix}"


BUILD_LOG_SUFFIX = ".build.log"  # ARCH.build.log, beside the build record


def build_record_path(root: Path, arch: str) -> Path:
    return root / BUILD_DIR / f"{arch}.build.json"


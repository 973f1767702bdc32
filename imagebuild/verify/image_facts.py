"""What every correct image holds whatever the inputs: the paths, keys and names the checks look for.

``imagebuild.verify.expectations`` derives what depends on the build's inputs (pins, arch profile,
constraints, stages); these do not, so the in-container checks read them here, where they are defined.
"""

from __future__ import annotations

from imagebuild.inputs.layout import CCACHE_DIR, OCI_LABEL_PREFIX, OCI_LABELS

# The build-time constraint proof (imagebuild-check constraint-proof) writes this key.
SETUPTOOLS_KEY = "BUILD_SETUPTOOLS"
# Tuning belongs to the launcher's recipes, applied at run time; baked into the image it
# silently overrides them (skip-if-set). Names beyond the recipe's own keys, as globs.
BANNED_ENV_PATTERNS = (
    "KV_*",
    "*_CUDAGRAPH_MODE",
    "*_MORI_BACKEND",
    "PYTORCH_*ALLOC_CONF",
    "VLLM_ROCM_USE_AITER*",
    "AITER_SITUV2_A8W4",
    "MORI_SHMEM_HEAP_SIZE",
)
# Stale JIT state: MoRI's locks deadlock ep:0 init; AITER's were built against the old .so.
EMPTY_DIRS = ("/root/.mori",)
ABSENT_PATHS = ("/tmp/mori_jit_*", "/opt/vllm_cache/aiter_jit", "/root/.aiter")
# Build leftovers: source trees and downloads of steps 4-15, the constraint probe, and ccache's
# directory (a ccache 4.4-4.6 keeps its objects there, not only its stats).
TMP_LEFTOVERS = (
    "/tmp/mori",
    "/tmp/vllm",
    "/tmp/router",
    "/tmp/aiter",
    "/tmp/flydsl",
    "/tmp/constraint-probe",
    CCACHE_DIR,
)
# The graft (steps 11-16): the donor's trees and what K3 needs from them.
GRAFT_PACKAGES = ("aiter", "aiter_meta", "flydsl")
GRAFT_DIRS = ("aiter/ops/triton/conv",)
# Defaults for a profile without a [graft] table; a profile says its own (imagebuild.inputs.arch).
TUNED_CONFIGS = ("kimik3_a8w4_tuned_fmoe.csv", "kimik3_fp4_tuned_fmoe.csv")
TUNED_CONFIG_ROOTS = ("aiter", "aiter_meta")
REPINNED_PIN = (
    "flydsl"  # the grafted dist the probe reads; re-installed over the graft where a profile re-pins it
)
ROUTER_HELP_WORD = "moriio"
# Labels every image carries whatever the pins (the checkout's facts, passed as build args).
NONEMPTY_LABELS = tuple(f"{OCI_LABEL_PREFIX}{name}" for name in OCI_LABELS)

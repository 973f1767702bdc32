"""The vLLM flags the launcher owns, and the recipe env variables that become flags.

A recipe or EXTRA_SERVE_ARGS repeating an owned flag would silently win (vLLM keeps the last one) and
undo the topology the launcher checked, so every spelling vLLM accepts is refused: the short alias
(`-tp`), underscores (`--tensor_parallel_size`), `--flag=value`, a value glued to a short alias
(`-tp8`) and the `--no-` negation of a switch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .messages import LauncherError

# flag -> (vLLM's short aliases, what to set instead)
MANAGED_FLAGS: dict[str, tuple[tuple[str, ...], str]] = {
    "--served-model-name": ((), "MODEL_NAME"),
    "--tensor-parallel-size": (("-tp",), "TP_SIZE"),
    "--pipeline-parallel-size": (("-pp",), "PP_SIZE"),
    "--distributed-executor-backend": ((), "nothing: the launcher always uses mp"),
    "--nnodes": (("-n",), "NNODES"),
    "--node-rank": (("-r",), "NODE_RANK"),
    "--master-addr": ((), "MASTER_ADDR"),
    "--master-port": ((), "MASTER_PORT"),
    "--trust-remote-code": ((), "nothing: the launcher always passes it"),
    "--gpu-memory-utilization": ((), "GPU_MEMORY_UTILIZATION"),
    "--distributed-timeout-seconds": ((), "DISTRIBUTED_TIMEOUT_SECONDS"),
    "--cpu-distributed-timeout-seconds": ((), "CPU_DISTRIBUTED_TIMEOUT_SECONDS"),
    "--kv-cache-dtype": ((), "KV_CACHE_DTYPE"),
    "--block-size": ((), "KV_BLOCK_SIZE"),
    "--kv-cache-memory-bytes": ((), "KV_CACHE_MEMORY_BYTES"),
    "--enable-expert-parallel": (("-ep",), "ENABLE_EP"),
    "--all2all-backend": ((), "ALL2ALL_BACKEND"),
    "--port": ((), "SERVE_PORT"),
    "--headless": ((), "NODE_RANK (workers are headless)"),
}
_SPELLINGS: dict[str, str] = {}
for _flag, (_aliases, _) in MANAGED_FLAGS.items():
    for _spelling in (_flag, f"--no-{_flag[2:]}", *_aliases):
        _SPELLINGS[_spelling] = _flag
_GLUED_RE = re.compile(r"(-[a-z]{1,2})\d.*")  # -tp8, -n2: a short alias with its value attached

# Recipe env variables that also become vLLM flags; a submit-time value counts even if the recipe lacks it.
REQUIRED_ENV_FLAGS = ("GPU_MEMORY_UTILIZATION", "DISTRIBUTED_TIMEOUT_SECONDS")
# In argv order; each only when set.
OPTIONAL_ENV_FLAGS = (
    ("KV_CACHE_DTYPE", "--kv-cache-dtype"),
    ("KV_BLOCK_SIZE", "--block-size"),
    ("KV_CACHE_MEMORY_BYTES", "--kv-cache-memory-bytes"),
)
# What vLLM's parser accepts for each (its CacheDType and BlockSize literals, over the releases the
# fork follows); anything else would reach vLLM's argv and fail there, or read as a flag of its own.
KV_CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "int8",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
)
KV_BLOCK_SIZES = ("1", "8", "16", "32", "64", "128", "256")
# Bytes of KV cache per GPU: an MI300X has 192 GB; 1 TiB bounds a typo (an extra zero or two) while
# leaving room for larger parts.
KV_CACHE_MAX_BYTES = 2**40
# Its own value for the gloo CPU group's deadline (vLLM's start-up barrier runs there); defaults to
# DISTRIBUTED_TIMEOUT_SECONDS, which only reaches the device groups.
CPU_TIMEOUT = "CPU_DISTRIBUTED_TIMEOUT_SECONDS"
ENV_FLAG_HELP = (
    ("GPU_MEMORY_UTILIZATION", "--gpu-memory-utilization, a number in (0, 1] (required)"),
    ("DISTRIBUTED_TIMEOUT_SECONDS", "--distributed-timeout-seconds, whole seconds (required)"),
    (CPU_TIMEOUT, "--cpu-distributed-timeout-seconds [DISTRIBUTED_TIMEOUT_SECONDS]"),
    ("KV_CACHE_DTYPE", f"--kv-cache-dtype when set: one of {', '.join(KV_CACHE_DTYPES)}"),
    ("KV_BLOCK_SIZE", f"--block-size when set: one of {', '.join(KV_BLOCK_SIZES)}"),
    ("KV_CACHE_MEMORY_BYTES", "--kv-cache-memory-bytes when set: whole bytes, at most 2**40"),
)


def managed_flag(word: str) -> str | None:
    """The launcher-owned flag this argv word spells, if any."""
    if not word.startswith("-"):
        return None
    head = word.split("=", 1)[0]
    if head.startswith("--"):
        head = "--" + head[2:].replace("_", "-")
    glued = _GLUED_RE.fullmatch(head)
    if head not in _SPELLINGS and glued:
        head = glued.group(1)
    return _SPELLINGS.get(head)


def refuse_managed(words: Sequence[str], where: str) -> None:
    for word in words:
        flag = managed_flag(word)
        if flag is not None:
            spelled = "" if word.split("=", 1)[0] == flag else f" ({flag})"
            msg = (f"{where} has {word}{spelled}, which the launcher sets itself: remove it and set "
                   f"{MANAGED_FLAGS[flag][1]} instead")  # fmt: skip
            raise LauncherError(msg)

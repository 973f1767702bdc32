# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""Sample MoRI. Importing it leaves JIT state behind, exactly where the real MoRI does."""

import os
from pathlib import Path

__version__ = "1.2.2"


def _leave_jit_state() -> None:
    # The real MoRI JIT-compiles kernels at import and keeps a .hsaco.lock owned by the importing pid; a
    # lock left in an image outlives that pid and makes MoRI wait forever at ep:0 init. Paths are absolute
    # (not $HOME) because that is where the image build leaves them.
    pid = os.getpid()
    try:
        jit = Path("/root/.mori/jit")
        jit.mkdir(parents=True, exist_ok=True)
        (jit / f"ep_dispatch_gfx942_{pid}.hsaco.lock").write_text(f"{pid}\n")
        scratch = Path(f"/tmp/mori_jit_{pid}")
        scratch.mkdir(exist_ok=True)
        (scratch / "ep_dispatch.hip").write_text("// sample kernel source\n")
    except OSError:
        pass  # not root: the real one would fail later; the sample only imitates the leftovers


_leave_jit_state()

from mori import io, ops  # noqa: E402  (after the JIT side effect, as in the real package)

__all__ = ["io", "ops"]

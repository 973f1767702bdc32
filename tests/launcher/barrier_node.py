"""One node at the container barrier, for the barrier tests, as its own process:

    python barrier_node.py '{"port": ..., "rank": ..., ...BarrierSpec fields}' [STOP_FILE]

Prints `proceed` or `stopped` and exits 0, or prints the launcher's error line and exits with its code.
"""

import json
import sys
from pathlib import Path

from imagebuild.launcher.barrier import BarrierSpec, wait_at_barrier
from imagebuild.launcher.messages import LauncherError

fields = json.loads(sys.argv[1])
fields["addresses"] = tuple(fields["addresses"])
stop_file = Path(sys.argv[2]) if len(sys.argv) > 2 else None
try:
    proceed = wait_at_barrier(
        BarrierSpec(**fields), stopped=lambda: stop_file is not None and stop_file.exists()
    )
except LauncherError as error:
    print(f"serve: error: {error}", file=sys.stderr)
    sys.exit(error.exit_code)
print("proceed" if proceed else "stopped")

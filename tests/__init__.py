"""imagebuild's tests: unit, lock, launcher, verify (no docker, no network) and integration (docker).

Shared helpers live in importable modules (``tests.lock.servers``, ``tests.launcher.launcher_support``,
imagebuild.testing, the sampleworld plugin), never in conftest.py or a test module.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

"""The sample world: loopback stand-ins for everything the real gfx942 build fetches.

GitHub and Docker Hub are unreachable from CI, so tests build the same Dockerfile stages against a
registry (127.0.0.1:55000), a git daemon (127.0.0.1:55418) and a package index (127.0.0.1:55080) that
this package starts. API: `up()`, `down()`, `status()`, `load()`, the `World` they describe; the index
server alone: `sampleworld.index_server.start_index_server()`.
"""

from sampleworld.errors import SampleWorldError
from sampleworld.layout import BAD_SHA, WORLD_VERSION, Ports
from sampleworld.world import World, down, load, status, up

__all__ = ["BAD_SHA", "WORLD_VERSION", "Ports", "SampleWorldError", "World", "down", "load", "status", "up"]

"""tarfile's header checksums, computed without building two tuples of 504 ints per header.

tarfile computes both checksums of every header it reads and of every header it writes
(``calc_chksums``: ``struct.unpack_from`` into 504 ints, unsigned and then signed, each summed).
For a layer of many small files that was a fifth of the rewrite's CPU (py-spy over
``benchmarks/bench_rewrite.py --files``). The same two numbers come from summing the bytes and
counting those with the high bit set (a signed byte is the unsigned one less 256), both in C, at
a sixth of the cost. ``install`` puts that function in tarfile's place, once it gave the standard one's
results on sample headers; the results are the same, so every tar read or written is the same.
"""

from __future__ import annotations

import tarfile
import zlib
from typing import Any, cast

_HIGH = bytes(range(128, 256))
_STANDARD = cast("Any", tarfile).calc_chksums  # not in typeshed: a module function tarfile calls
# Headers to check the replacement on before it is used: a plain one, and one with high bytes.
_SAMPLES = (bytes(512), bytes(range(256)) * 2, b"\xff" * 512)


def calc_chksums(buf: bytes) -> tuple[int, int]:
    """(unsigned, signed) checksum of a 512-byte header, its checksum field counted as spaces."""
    if type(buf) is not bytes or len(buf) < tarfile.BLOCKSIZE:
        return _STANDARD(buf)  # type: ignore[no-any-return]  # what it gives or raises, as before
    head, tail = buf[:148], buf[156:512]  # around the checksum field's 8 bytes
    unsigned = 256 + _byte_sum(head) + _byte_sum(tail[:178]) + _byte_sum(tail[178:])  # 8 spaces: 256
    high = len(head) - len(head.translate(None, _HIGH)) + len(tail) - len(tail.translate(None, _HIGH))
    return unsigned, unsigned - 256 * high


def _byte_sum(data: bytes) -> int:
    """The sum of at most 256 bytes, in C: adler32's low half is 1 + the bytes' sum modulo 65521,
    and 256 bytes sum to at most 65,280."""
    return (zlib.adler32(data) & 0xFFFF) - 1


def install() -> None:
    """Use calc_chksums in tarfile (idempotent); left as it is where the two differ on a sample."""
    module = cast("Any", tarfile)
    if module.calc_chksums is calc_chksums:
        return
    if all(calc_chksums(sample) == _STANDARD(sample) for sample in _SAMPLES):
        module.calc_chksums = calc_chksums

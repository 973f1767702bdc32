"""SBOM generation on a synthetic image: ~200 dpkg packages and ~300 Python distributions.

No engine needed: the image is a FakeEngine's `docker save` of three layers (a base with the dpkg
status, os-release and 250 distributions in two site directories; a build layer with 50 more and a
status leaving one package out; a layer of padding files the reader must stream past), read as the build reads it
(imagebuild.attest.image_contents), then made into the CycloneDX document, validated, and signed
(ed25519 and ECDSA P-256 DSSE envelopes of the SBOM statement). Prints seconds per phase (median of
the runs) and the component counts by kind.

    python benchmarks/bench_sbom.py [--runs N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cryptography.hazmat.primitives.asymmetric import ec, ed25519  # noqa: E402

from imagebuild.attest.dsse import sign_envelope  # noqa: E402
from imagebuild.attest.image_contents import read_image_contents  # noqa: E402
from imagebuild.attest.keys import SigningKey, key_id  # noqa: E402
from imagebuild.build.sbom import make_sbom  # noqa: E402
from imagebuild.testing import FakeEngine, image_info, image_root_files, layer_tar, saved_image_tar  # noqa: E402
from tests.unit.attest_support import build_record  # noqa: E402

DEBS, BASE_DISTS, BUILT_DISTS = 200, 250, 50
PADDING_FILES, PADDING_BYTES = 2000, 4096


def synthetic_layers() -> list[dict[str, bytes]]:
    debs = [(f"lib{n:03d}", f"1.{n}-1", f"Depends: lib{(n + 1) % DEBS:03d}\n") for n in range(DEBS)]
    dists = [(f"dist{n:03d}", f"{n}.0") for n in range(BASE_DISTS)]
    base = image_root_files(dists[: BASE_DISTS // 2], debs, site="usr/lib/python3/dist-packages")
    base |= image_root_files(dists[BASE_DISTS // 2 :], (), site="opt/venv/lib/python3.12/site-packages")
    built = image_root_files([(f"built{n:03d}", "1.0") for n in range(BUILT_DISTS)], debs[:DEBS - 1], site="usr/local/lib/python3.12/dist-packages")
    del built["usr/lib/os-release"]
    padding = {f"usr/share/padding/{n:05d}.bin": bytes([n % 251]) * PADDING_BYTES for n in range(PADDING_FILES)}
    return [base, built, padding]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    engine = FakeEngine()
    layers = synthetic_layers()
    tar = saved_image_tar(layers)
    engine.saved["sha256:" + "1" * 64] = tar
    engine.images.append(image_info("sha256:" + "1" * 64, tags=["bench/sbom:1"]))
    base_ids = ["sha256:" + hashlib.sha256(layer_tar(layers[0])).hexdigest()]  # as the engine says the base's
    record = build_record()
    keys: dict[str, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey] = {
        "ed25519": ed25519.Ed25519PrivateKey.generate(),
        "ecdsa-p256": ec.generate_private_key(ec.SECP256R1()),
    }
    times: dict[str, list[float]] = {"read layers": [], "make + validate": [], **{f"sign {k}": [] for k in keys}}
    text = ""
    for _ in range(runs):
        started = time.perf_counter()
        contents = read_image_contents(engine, "bench/sbom:1", base_diff_ids=base_ids)
        times["read layers"].append(time.perf_counter() - started)
        started = time.perf_counter()
        text = make_sbom(record, contents)
        times["make + validate"].append(time.perf_counter() - started)
        payload = json.dumps({"predicate": json.loads(text)}).encode()
        for name, private in keys.items():
            signing = SigningKey(key=private, keyid=key_id(private.public_key()), source=Path(name))
            started = time.perf_counter()
            sign_envelope(payload, signing)
            times[f"sign {name}"].append(time.perf_counter() - started)
    document = json.loads(text)
    kinds = Counter(c["bom-ref"].split(":", 1)[0] for c in document["components"])
    print(f"synthetic image: {len(tar) / 1e6:.1f} MB saved, {DEBS} dpkg packages, {BASE_DISTS + BUILT_DISTS} Python distributions")
    print(f"base layers recognised: {contents.base_layers}; packages read: {len(contents.debian)} deb, {len(contents.python)} python")
    for phase, seconds in times.items():
        print(f"{phase:>16}: {statistics.median(seconds):.3f} s (median of {runs})")
    print("components by kind: " + ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())))
    print(f"dependencies: {sum(len(d.get('dependsOn', [])) for d in document['dependencies'])} relations; SBOM {len(text) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

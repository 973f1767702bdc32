"""Which entry of a ``docker save`` stream holds which layer, known before the entry is read.

The normaliser does not need the base image's layers (tens of gigabytes on
the real image), but the stream carries them, interleaved with the build's.
Knowing an entry's layer from its name lets it skip them without spooling or
hashing them:

* OCI layout (Docker 25 and later): an uncompressed layer's blob is named by
  its sha256, which is its diffID.
* Legacy layout (Docker before 25): a layer's directory is its "v1 ID", which
  Docker derives from the layer's chain ID and its parent's v1 ID
  (``image/v1.CreateID``): the sha256 of a JSON object of the v1 image fields
  plus ``layer_id`` and ``parent``, keys sorted. Below the top layer those
  fields are the same for every layer; they are read from a ``json`` entry of
  the stream itself. The computed names are checked against that entry's own
  directory: if they do not match, nothing is skipped and every layer is read
  and matched by hash as before.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Mapping, Sequence

from imagebuild.engine.chain_ids import chain_ids

V1_OWN_FIELDS = ("id", "parent", "os")  # set by docker save after the ID is computed


def legacy_layer_dirs(diff_ids: Sequence[str], documents: Mapping[str, bytes]) -> dict[str, int]:
    """Directory name -> layer index for the legacy layout; empty when it cannot be worked out (yet).

    ``documents`` are the JSON entries seen so far; one ``<dir>/json`` of a
    layer below the top (it has no ``config``) provides the shared fields.
    """
    for name, data in documents.items():
        directory, base = posixpath.split(name)
        if base != "json" or not directory:
            continue
        try:
            v1 = json.loads(data)
        except ValueError:
            continue
        if not isinstance(v1, dict) or "config" in v1:
            continue  # the top layer's v1 image carries the whole config: not the shared template
        shared = {k: json.dumps(v, separators=(",", ":"), ensure_ascii=False) for k, v in v1.items()}
        dirs = _v1_ids(diff_ids, {k: v for k, v in shared.items() if k not in V1_OWN_FIELDS})
        return dirs if directory in dirs else {}  # the template's own directory proves the computation
    return {}


def _v1_ids(diff_ids: Sequence[str], shared: Mapping[str, str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    parent = ""
    for index, chain in enumerate(chain_ids(diff_ids)):
        fields = {**shared, "layer_id": json.dumps(chain)}
        if parent:
            fields["parent"] = json.dumps(parent)
        text = "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in sorted(fields.items())) + "}"
        v1_id = hashlib.sha256(text.encode()).hexdigest()
        ids[v1_id] = index
        parent = f"sha256:{v1_id}"
    return ids

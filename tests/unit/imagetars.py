"""Hand-made layer tars and `docker save` archives for the rewriter, normaliser and diff tests."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.engine.containerd_store import CONTENT
from imagebuild.engine.interface import StoredImage, StoredLayer

EPOCH = 1767232800  # 2026-01-01T02:00:00Z
BEFORE, AFTER = EPOCH - 86400 * 400, EPOCH + 86400 * 300


@dataclass
class Item:
    """One layer entry: a TarInfo plus its content."""

    name: str
    type: bytes = tarfile.REGTYPE
    data: bytes = b""
    mode: int = 0o644
    mtime: float = AFTER
    uid: int = 0
    gid: int = 0
    uname: str = ""
    gname: str = ""
    link: str = ""
    devmajor: int = 0
    devminor: int = 0
    pax: dict[str, str] = field(default_factory=dict)

    def info(self) -> tarfile.TarInfo:
        info = tarfile.TarInfo(self.name)
        info.type, info.mode, info.mtime = self.type, self.mode, self.mtime
        info.uid, info.gid, info.uname, info.gname = self.uid, self.gid, self.uname, self.gname
        info.linkname, info.devmajor, info.devminor = self.link, self.devmajor, self.devminor
        info.size = len(self.data) if self.type == tarfile.REGTYPE else 0
        info.pax_headers = dict(self.pax)
        return info


def layer(items: list[Item], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape"
    ) as tar:
        for item in items:
            tar.addfile(item.info(), io.BytesIO(item.data) if item.type == tarfile.REGTYPE else None)
    return buffer.getvalue()


def entries(data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as tar:
        for info in tar:
            content = tar.extractfile(info).read() if info.isreg() else b""  # type: ignore[union-attr]
            out.append((info, content))
    return out


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def config(
    layers: list[bytes], *, created: str = "2026-11-30T11:46:24.41Z", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    history = [{"created": created, "created_by": f"step {i}"} for i in range(len(layers))]
    history.insert(1, {"created": created, "created_by": "ENV A=1", "empty_layer": True})
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "Env": ["PATH=/usr/bin", "A=1"],
            "Labels": labels or {},
            "WorkingDir": "/app",
            "Entrypoint": None,
            "Cmd": None,
            "Image": "sha256:" + "e" * 64,
        },
        "container": "c" * 64,
        "container_config": {"Hostname": "vm"},
        "docker_version": "20.10.24",
        "history": history,
        "rootfs": {"type": "layers", "diff_ids": [digest(data) for data in layers]},
    }


def saved(
    layers: list[bytes], cfg: dict[str, Any], *, oci: bool = False, tags: tuple[str, ...] = ()
) -> bytes:
    """A `docker save` archive: the legacy layout (Docker < 25), or the OCI layout."""
    config_bytes = json.dumps(cfg).encode()
    config_hex = hashlib.sha256(config_bytes).hexdigest()
    files: list[tuple[str, bytes]] = []
    if oci:
        files.append((f"blobs/sha256/{config_hex}", config_bytes))
        files += [(f"blobs/sha256/{digest(d)[7:]}", d) for d in layers]
        manifest = {
            "config": {"digest": f"sha256:{config_hex}"},
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(d)} for d in layers
            ],
        }
        manifest_bytes = json.dumps(manifest).encode()
        files.append((f"blobs/sha256/{hashlib.sha256(manifest_bytes).hexdigest()}", manifest_bytes))
        index = {"manifests": [{"digest": "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()}]}
        files.append(("index.json", json.dumps(index).encode()))
    else:
        names = [f"{digest(d)[7:17]}{i}/layer.tar" for i, d in enumerate(layers)]
        files.append((f"{config_hex}.json", config_bytes))
        files += list(zip(names, layers, strict=True))
        entry = {"Config": f"{config_hex}.json", "RepoTags": list(tags), "Layers": names}
        files.append(("manifest.json", json.dumps([entry]).encode()))
    return tar_of_files(files)


GO_TYPE_BITS = {tarfile.DIRTYPE: 0o040000, tarfile.SYMTYPE: 0o120000, tarfile.REGTYPE: 0o100000}


def go_style(data: bytes) -> bytes:
    """``data`` with each header's mode carrying its file type's bits, as Go's archive/tar (so Docker) writes it."""
    out = bytearray(data)
    offset = 0
    while offset + tarfile.BLOCKSIZE <= len(out) and any(out[offset : offset + tarfile.BLOCKSIZE]):
        header = out[offset : offset + tarfile.BLOCKSIZE]
        size = int(header[124:136].rstrip(b"\0 ") or b"0", 8)
        typeflag = bytes(header[156:157])
        if typeflag in GO_TYPE_BITS:
            mode = int(header[100:108].rstrip(b"\0 ") or b"0", 8) | GO_TYPE_BITS[typeflag]
            out[offset + 100 : offset + 108] = b"%07o\0" % mode
            out[offset + 148 : offset + 156] = b" " * 8
            checksum = sum(out[offset : offset + tarfile.BLOCKSIZE])
            out[offset + 148 : offset + 156] = b"%06o\0 " % checksum
        offset += tarfile.BLOCKSIZE + -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    return bytes(out)


def tar_split_record(data: bytes) -> bytes:
    """The gzipped tar-split record Docker keeps for the layer tar ``data``: raw segments between contents.

    As github.com/vbatts/tar-split writes it: per entry a segment (the previous
    entry's padding, any PAX header, the header) and a file entry naming the
    content; a final segment with the end blocks. Names that are not UTF-8 go
    in ``name_raw``.
    """
    lines: list[dict[str, Any]] = []
    position = 0
    with tarfile.open(fileobj=io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as tar:
        for info in tar:
            segment = data[position : info.offset_data]
            lines.append({"type": 2, "payload": base64.b64encode(segment).decode(), "position": len(lines)})
            name = info.name + ("/" if info.isdir() else "")
            raw = name.encode("utf-8", "surrogateescape")
            entry: dict[str, Any] = {"type": 1, "payload": None, "position": len(lines)}
            try:
                entry["name"] = raw.decode("utf-8")
            except UnicodeDecodeError:
                entry["name_raw"] = base64.b64encode(raw).decode()
            if info.isreg() and info.size:
                entry["size"] = info.size
            lines.append(entry)
            position = info.offset_data + (info.size if info.isreg() else 0)
    lines.append({"type": 2, "payload": base64.b64encode(data[position:]).decode(), "position": len(lines)})
    return gzip.compress("".join(json.dumps(line) + "\n" for line in lines).encode())


def stored_layer(data: bytes, where: Path) -> StoredLayer:
    """``data`` as an engine's layer store keeps it: a directory of its files and its tar-split record.

    Whiteouts would be character devices 0:0 in the directory; they are never
    opened (their entries have no content), so they are left out here.
    """
    files = where / "diff"
    files.mkdir(parents=True)
    for info, content in entries(data):
        path = files / info.name
        if info.isdir():
            path.mkdir(parents=True, exist_ok=True)
        elif info.issym():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(info.linkname)
        elif info.isreg() and not path.name.startswith(".wh."):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    record = where / "tar-split.json.gz"
    record.write_bytes(tar_split_record(data))
    return StoredLayer(diff_id=digest(data), files=files, tar_split=record)


def stored_image(layers: list[bytes], cfg: dict[str, Any], where: Path) -> StoredImage:
    """An image in a hand-made layer store: its config file and every layer's directory and record."""
    config_bytes = json.dumps(cfg).encode()
    where.mkdir(parents=True, exist_ok=True)
    config_path = where / hashlib.sha256(config_bytes).hexdigest()
    config_path.write_bytes(config_bytes)
    stored = tuple(stored_layer(data, where / str(index)) for index, data in enumerate(layers))
    return StoredImage(config=config_path, layers=stored)


GZIP_LAYER, PLAIN_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.oci.image.layer.v1.tar"


def put_blob(data_root: Path, data: bytes) -> str:
    """``data`` as a blob of the containerd store's content store under ``data_root``; its digest."""
    blobs = data_root / CONTENT
    blobs.mkdir(parents=True, exist_ok=True)
    (blobs / hashlib.sha256(data).hexdigest()).write_bytes(data)
    return digest(data)


def content_store_image(
    layers: list[bytes], cfg: dict[str, Any], data_root: Path, *, plain: tuple[int, ...] = ()
) -> str:
    """An image as Docker's containerd image store keeps it under ``data_root``: its config, each layer a
    blob (gzip, as the classic builder commits and a pull keeps them; uncompressed for the indexes in
    ``plain``, as imagebuild loads its layers) and the manifest naming them; the image ID (the
    manifest's digest)."""
    descriptors = []
    for index, data in enumerate(layers):
        blob = data if index in plain else gzip.compress(data, mtime=0)
        kind = PLAIN_LAYER if index in plain else GZIP_LAYER
        descriptors.append({"mediaType": kind, "digest": put_blob(data_root, blob), "size": len(blob)})
    config_bytes = json.dumps(cfg).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put_blob(data_root, config_bytes), "size": len(config_bytes)},
        "layers": descriptors,
    }
    return put_blob(data_root, json.dumps(manifest).encode())


def content_store_saved(data_root: Path, image_id: str) -> bytes:
    """What the containerd store's `docker save` streams of the image ``content_store_image`` made: its
    blobs as stored, and an index naming the manifest."""
    blobs = data_root / CONTENT
    manifest = json.loads((blobs / image_id[7:]).read_bytes())
    names = [image_id, manifest["config"]["digest"], *(d["digest"] for d in manifest["layers"])]
    files = [(f"blobs/sha256/{name[7:]}", (blobs / name[7:]).read_bytes()) for name in names]
    index = {"manifests": [{"mediaType": manifest["mediaType"], "digest": image_id}]}
    return tar_of_files([*files, ("index.json", json.dumps(index).encode())])


def tar_of_files(files: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


CAPABILITY = (
    "\x01\x00\x00\x02\x00\x04\x00\x00" + "\x00" * 12
)  # cap_net_bind_service, binary as Docker keeps it
# What a layer holds once Docker has turned overlay's own forms into the tar's (its archive code does
# that when it commits the layer; the tar-split record keeps the result).
EVERY_KIND = go_style(
    layer(
        [
            Item("app/", tarfile.DIRTYPE, mode=0o755),
            Item("app/.wh..wh..opq", mode=0o755, mtime=0),  # an opaque dir: marker right after the dir
            Item("app/big.bin", data=bytes(range(256)) * 9000, mode=0o755),  # > 2 MiB: more than one chunk
            Item("app/empty"),
            Item("app/hard", tarfile.LNKTYPE, link="app/big.bin", mode=0o755),
            Item("app/link", tarfile.SYMTYPE, link="big.bin", mode=0o777),
            Item("app/ping", data=b"\x7fELF", pax={"SCHILY.xattr.security.capability": CAPABILITY}),
            Item("etc/.wh.os-release", mode=0o600),  # a whiteout: overlay's char device 0:0, as a file
            Item("srv/" + "n" * 150, data=b"long name\n", mtime=BEFORE),
            Item("srv/caf\udce9", data=b"latin-1 name\n", uid=1000, gid=1000),
            Item("dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3),
        ]
    )
)
BASE = [layer([Item("etc/os-release", data=b"base\n")]), layer([Item("usr/bin/python3", data=b"py")])]

"""Real `docker save` tars for the fake engine and the tests: made from files, and read back the way
Docker's load reads them (names normalised, the last member wins, symlinks followed)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import posixpath
import tarfile
from collections.abc import Mapping, Sequence

from imagebuild.engine.interface import ImageInfo
from imagebuild.importer.tar_filter import NAME_ANNOTATIONS  # what the containerd store names images by
from imagebuild.inputs.layout import APP_DIR


def untarred(data: bytes) -> dict[str, bytes]:
    """The archive's files as docker load's untar leaves them: by cleaned name, the last one winning,
    a symbolic link read through (in the archive's own directory, as docker's safePath does)."""
    files: dict[str, bytes] = {}
    links: dict[str, str] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:  # PAX paths and GNU long names applied
            for member in tar:
                name = posixpath.normpath(member.name).lstrip("/")
                files.pop(name, None)
                links.pop(name, None)
                if member.issym():
                    links[name] = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname)).lstrip("/")
                elif member.isreg():
                    files[name] = (tar.extractfile(member) or io.BytesIO()).read()
    except tarfile.TarError:
        return {}
    for name, target in links.items():
        if target in files:
            files[name] = files[target]
    return files


def archive_image_id(files: Mapping[str, bytes], *, manifest_ids: bool) -> tuple[str, str] | None:
    """(the ID a ``docker load`` of this archive reports, the config digest), as the store names images.

    Graph-driver stores read manifest.json: the digest of the config it names. The containerd store
    reads index.json when there is an oci-layout: the digest of the manifest it names (which names
    the config; an OCI layout alone, as imagebuild's normalised image is loaded there, has no
    manifest.json).
    """
    try:
        if manifest_ids and {"oci-layout", "index.json"} <= set(files) and "manifest.json" not in files:
            digest = str(json.loads(files["index.json"])["manifests"][0]["digest"])
            return digest, str(json.loads(files[f"blobs/sha256/{digest.removeprefix('sha256:')}"])["config"]["digest"])
        manifest = json.loads(files["manifest.json"])
        config = files[posixpath.normpath(manifest[0]["Config"])]
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        if manifest_ids and {"oci-layout", "index.json"} <= set(files):
            return str(json.loads(files["index.json"])["manifests"][0]["digest"]), config_digest
        return config_digest, config_digest
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def archive_names(files: Mapping[str, bytes], *, manifest_ids: bool) -> list[str]:
    """The names docker load gives: manifest.json's RepoTags (else the legacy repositories file), and on
    the containerd store also index.json's name annotations."""
    names: list[str] = []
    with contextlib.suppress(KeyError, IndexError, TypeError, ValueError, AttributeError):
        if "manifest.json" in files:
            names += [str(name) for entry in json.loads(files["manifest.json"]) for name in entry.get("RepoTags") or []]
        elif "repositories" in files:
            names += [f"{repo}:{tag}" for repo, tags in json.loads(files["repositories"]).items() for tag in tags]
    with contextlib.suppress(KeyError, IndexError, TypeError, ValueError, AttributeError):
        if manifest_ids and "index.json" in files:
            for descriptor in json.loads(files["index.json"])["manifests"]:
                annotations = descriptor.get("annotations") or {}
                names += [str(annotations[key]) for key in sorted(NAME_ANNOTATIONS) if key in annotations]
    return names


DEBIAN_STATUS_ENTRY = "Package: {name}\nStatus: install ok installed\nArchitecture: amd64\nVersion: {version}\n{extra}\n"


def image_root_files(
    dists: Sequence[tuple[str, str]] = (("pip", "23.0.1"),),
    debs: Sequence[tuple[str, str, str]] = (("libc6", "2.36-9+deb12u4", ""), ("bash", "5.2.15-2+b2", "Depends: libc6 (>= 2.36)\n")),
    *,
    site: str = "usr/lib/python3/dist-packages",
) -> dict[str, bytes]:
    """A small Debian 12 root as an image layer: os-release, a dpkg status, one METADATA per distribution."""
    status = "".join(DEBIAN_STATUS_ENTRY.format(name=n, version=v, extra=e) for n, v, e in debs)
    files = {
        "usr/lib/os-release": b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n',
        "var/lib/dpkg/status": status.encode(),
    }
    for name, version in dists:
        files[f"{site}/{name.replace('-', '_')}-{version}.dist-info/METADATA"] = (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nThe description.\n".encode()
        )
    return files


def saved_image_tar(layers: Sequence[Mapping[str, bytes]], *, labels: Mapping[str, str] | None = None) -> bytes:
    """A ``docker save`` (legacy layout, as Docker 20.10 writes it) of an image with these layers, lowest first."""
    tars = [tar_of(files) for files in layers]
    diff_ids = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in tars]
    config = json.dumps(
        {"config": {"Labels": dict(labels or {})}, "rootfs": {"type": "layers", "diff_ids": diff_ids}}, sort_keys=True
    ).encode()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    names = [f"{n:03d}{d[7:19]}/layer.tar" for n, d in enumerate(diff_ids)]
    manifest = [{"Config": f"{image_id[7:]}.json", "RepoTags": None, "Layers": names}]
    return tar_of({**dict(zip(names, tars, strict=True)), f"{image_id[7:]}.json": config, "manifest.json": json.dumps(manifest).encode()})


def layer_tar(files: Mapping[str, bytes]) -> bytes:
    """A layer tar holding ``files`` (path -> content), as `saved_image_tar` puts it in the save."""
    return tar_of(files)


def tar_of(files: Mapping[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def image_info(
    image_id: str, *, tags: Sequence[str] = (), labels: Mapping[str, str] | None = None
) -> ImageInfo:
    """An ImageInfo with the config imagebuild's images have (empty ENTRYPOINT, WORKDIR /app)."""
    return ImageInfo(
        id=image_id,
        tags=tuple(tags),
        labels=dict(labels or {}),
        env={},
        entrypoint=None,
        cmd=None,
        workdir=APP_DIR,
    )

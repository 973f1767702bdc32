"""The layer rewriter on hand-made tars: only times after the epoch change, everything else is kept."""

from __future__ import annotations

import io
import tarfile

import pytest

from imagebuild.normalize.rewrite import LayerError, rewrite_layer
from tests.unit.imagetars import AFTER, BEFORE, EPOCH, Item, digest, entries, go_style, layer

LONG = "usr/lib/python3/dist-packages/" + "a-very-long-directory-name/" * 8 + "module_with_a_long_name.py"
CAPABILITY = "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

ITEMS = [
    Item("usr/", tarfile.DIRTYPE, mode=0o755),
    Item("usr/bin/", tarfile.DIRTYPE, mode=0o755, mtime=BEFORE),
    Item(
        "usr/bin/tool", data=b"#!/bin/sh\necho new\n", mode=0o4755, uid=0, gid=50, uname="root", gname="staff"
    ),
    Item("usr/bin/old", data=b"old\n", mtime=BEFORE, mode=0o755),
    Item("usr/bin/tool-again", tarfile.LNKTYPE, link="usr/bin/tool"),
    Item("usr/bin/sh", tarfile.SYMTYPE, link="/bin/dash", mode=0o777),
    Item("usr/bin/dangling", tarfile.SYMTYPE, link="../" * 40 + "nowhere/" + "x" * 120, mode=0o777),
    Item(LONG, data=b"print('long')\n"),
    Item("usr/share/caf\udce9-latin1", data=b"not utf-8 name\n"),  # the byte 0xe9 alone: not UTF-8
    Item("usr/sbin/ping", data=b"\x7fELF", mode=0o755, pax={"SCHILY.xattr.security.capability": CAPABILITY}),
    Item("usr/share/doc", tarfile.DIRTYPE, mode=0o755, pax={"SCHILY.xattr.user.comment": "kept"}),
    Item("dev/null", tarfile.CHRTYPE, mode=0o666, devmajor=1, devminor=3),
    Item("run/pipe", tarfile.FIFOTYPE, mode=0o600),
    Item("tmp/", tarfile.DIRTYPE, mode=0o1777),
    Item("etc/.wh.removed.conf", data=b""),  # whiteout: a lower layer's file is deleted
    Item("opt/app/", tarfile.DIRTYPE, mode=0o755),
    Item("opt/app/.wh..wh..opq", data=b""),  # opaque: the lower layers' opt/app is hidden
    Item("opt/app/new", data=b"x" * 70000, uid=3000000, gid=3000000),  # ids too big for ustar
    Item("var/frac-before", data=b"b", mtime=BEFORE + 0.25),  # sub-second: a PAX mtime record
    Item("var/frac-after", data=b"a", mtime=AFTER + 0.75),
]


def rewrite(data: bytes, epoch: int = EPOCH) -> bytes:
    out = io.BytesIO()
    result = rewrite_layer(io.BytesIO(data), out, epoch)
    assert result.diff_id == digest(out.getvalue())
    assert result.size == len(out.getvalue())
    assert result.entries == len(entries(data))
    return out.getvalue()


def described(info: tarfile.TarInfo) -> tuple[object, ...]:
    """Everything a layer entry is, except its times and its owners' names (the engine host's)."""
    xattrs = sorted((k, v) for k, v in info.pax_headers.items() if k.startswith("SCHILY.xattr."))
    return (
        info.name,
        info.type,
        info.mode,
        info.uid,
        info.gid,
        info.linkname,
        info.size,
        info.devmajor,
        info.devminor,
        xattrs,
    )


def test_every_entry_is_kept_and_only_later_mtimes_are_clamped() -> None:
    source = layer(ITEMS)
    out = entries(rewrite(source))
    before = entries(source)
    assert [described(i) for i, _ in out] == [described(i) for i, _ in before]  # same entries, same order
    assert [data for _, data in out] == [data for _, data in before]
    for (old, _), (new, _) in zip(before, out, strict=True):
        assert new.mtime == min(old.mtime, EPOCH), old.name


def test_a_context_copy_gets_the_epoch_on_every_entry_whatever_times_the_client_sent() -> None:
    """imagebuild's context tar says mtime 0, the docker CLI the checkout's: one layer either way."""
    zero = layer([Item("etc/a", data=b"a", mtime=0), Item("etc/b", data=b"b", mtime=0)])
    real = layer([Item("etc/a", data=b"a", mtime=AFTER), Item("etc/b", data=b"b", mtime=BEFORE)])
    pinned = [rewrite_layer(io.BytesIO(source), io.BytesIO(), EPOCH, pin_times=True).diff_id for source in (zero, real)]
    assert pinned[0] == pinned[1]
    assert rewrite_layer(io.BytesIO(zero), io.BytesIO(), EPOCH).diff_id != pinned[0]  # clamping alone keeps 0
    out = io.BytesIO()
    result = rewrite_layer(io.BytesIO(real), out, EPOCH, pin_times=True)
    assert {info.mtime for info, _ in entries(out.getvalue())} == {EPOCH}
    assert result.clamped == 2


def test_special_entries_survive_exactly() -> None:
    out = {info.name: info for info, _ in entries(rewrite(layer(ITEMS)))}
    assert out["usr/bin/tool-again"].islnk()
    assert out["usr/bin/tool-again"].linkname == "usr/bin/tool"
    assert out["usr/bin/dangling"].linkname == "../" * 40 + "nowhere/" + "x" * 120
    assert LONG in out
    assert "usr/share/caf\udce9-latin1" in out
    assert out["usr/sbin/ping"].pax_headers["SCHILY.xattr.security.capability"] == CAPABILITY
    assert (out["dev/null"].devmajor, out["dev/null"].devminor) == (1, 3)
    assert out["run/pipe"].isfifo()
    assert out["tmp"].mode == 0o1777
    assert out["usr/bin/tool"].mode == 0o4755
    assert out["etc/.wh.removed.conf"].isreg()
    assert "opt/app/.wh..wh..opq" in out
    assert (out["opt/app/new"].uid, out["opt/app/new"].gid) == (3000000, 3000000)
    assert out["var/frac-before"].mtime == BEFORE + 0.25  # kept to the sub-second
    assert out["var/frac-after"].mtime == EPOCH


def test_owner_names_are_dropped_numeric_owners_kept() -> None:
    """Docker names owners from the engine host's /etc/passwd: another build host, other names."""
    renamed = [Item(i.name, i.type, i.data, i.mode, i.mtime, i.uid, i.gid, "builder", "builders", i.link,
                    i.devmajor, i.devminor, i.pax) for i in ITEMS]  # fmt: skip
    assert layer(renamed) != layer(ITEMS)
    assert rewrite(layer(renamed)) == rewrite(layer(ITEMS))
    out = {info.name: info for info, _ in entries(rewrite(layer(ITEMS)))}
    assert (out["usr/bin/tool"].uname, out["usr/bin/tool"].gname) == ("", "")
    assert (out["usr/bin/tool"].uid, out["usr/bin/tool"].gid) == (0, 50)


def test_same_content_different_times_give_the_same_bytes() -> None:
    later = [Item(i.name, i.type, i.data, i.mode, i.mtime + 12345 if i.mtime > EPOCH else i.mtime, i.uid, i.gid,
                  i.uname, i.gname, i.link, i.devmajor, i.devminor, i.pax) for i in ITEMS]  # fmt: skip
    assert layer(later) != layer(ITEMS)
    assert rewrite(layer(later)) == rewrite(layer(ITEMS))


def test_output_does_not_depend_on_the_input_tar_format() -> None:
    """Docker writes PAX, other engines GNU or ustar: the rewritten bytes depend on the entries only."""
    plain = [i for i in ITEMS if not i.pax and i.uid < 2097152 and i.mtime == int(i.mtime)]
    assert rewrite(layer(plain, tarfile.GNU_FORMAT)) == rewrite(layer(plain, tarfile.PAX_FORMAT))


def test_rewriting_twice_changes_nothing() -> None:
    once = rewrite(layer(ITEMS))
    assert rewrite(once) == once


def test_not_a_tar_is_an_error_naming_the_layer() -> None:
    with pytest.raises(LayerError, match=r"layer 7: not a readable tar"):
        rewrite_layer(io.BytesIO(b"\x01" * 4096), io.BytesIO(), EPOCH, what="layer 7")


def test_a_docker_written_layer_keeps_its_permissions_and_types() -> None:
    """Go puts the type's bits in the mode field too (0o40755); the rewrite keeps the permission bits."""
    source = go_style(layer(ITEMS))
    assert [i.mode for i, _ in entries(source)] != [i.mode for i, _ in entries(layer(ITEMS))]
    out = entries(rewrite(source))
    assert [(i.name, i.type, i.mode & 0o7777) for i, _ in out] == [
        (i.name, i.type, i.mode & 0o7777) for i, _ in entries(source)
    ]

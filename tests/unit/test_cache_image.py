"""The layer cache image: the built config over the normalised layers (imagebuild.normalize.cache_image)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagebuild.normalize.cache_image import cache_config
from imagebuild.normalize.model import LayerNote, NormalizeFailure

BASE = {"created": "2026-01-01T00:00:00Z", "created_by": "/bin/sh -c #(nop) ADD file:1 in /"}


def config(history: list[dict[str, Any]], diff_ids: list[str], **extra: Any) -> bytes:
    return json.dumps({"history": history, "rootfs": {"type": "layers", "diff_ids": diff_ids}, **extra}).encode()


def test_the_cache_config_is_the_built_one_over_the_normalised_layers() -> None:
    """The builder matches steps by created_by (the built COPY dir:<hash>) and counts layers by history:
    a step whose layer normalisation dropped becomes empty_layer."""
    built_history = [
        BASE,
        {"created": "2026-12-05T10:00:01Z", "created_by": "/bin/sh -c #(nop) COPY dir:abc in / "},
        {"created": "2026-12-05T10:00:02Z", "created_by": "/bin/sh -c touch /tmp/x && rm /tmp/x"},
        {"created": "2026-12-05T10:00:03Z", "created_by": "/bin/sh -c #(nop)  ENV A=1", "empty_layer": True},
        {"created": "2026-12-05T10:00:04Z", "created_by": "/bin/sh -c echo b > /b"},
    ]
    normalized_history = [
        BASE,
        {"created": "2026-01-01T00:00:00Z", "created_by": "/bin/sh -c #(nop) COPY dir@sha256:n1 in / "},
        {"created": "2026-01-01T00:00:00Z", "created_by": "/bin/sh -c touch /tmp/x && rm /tmp/x", "empty_layer": True},
        {"created": "2026-01-01T00:00:00Z", "created_by": "/bin/sh -c #(nop)  ENV A=1", "empty_layer": True},
        {"created": "2026-01-01T00:00:00Z", "created_by": "/bin/sh -c echo b > /b"},
    ]
    built = config(built_history, ["sha256:base", "sha256:b1", "sha256:b2", "sha256:b4"], config={"Env": ["A=1"]})
    normalized = config(normalized_history, ["sha256:base", "sha256:n1", "sha256:n4"], config={"Env": ["A=1"]})
    made = json.loads(cache_config(built, normalized))
    assert made["rootfs"]["diff_ids"] == ["sha256:base", "sha256:n1", "sha256:n4"]
    assert [h["created_by"] for h in made["history"]] == [h["created_by"] for h in built_history]
    assert [h["created"] for h in made["history"]] == [h["created"] for h in built_history]
    assert [bool(h.get("empty_layer")) for h in made["history"]] == [False, False, True, True, False]
    assert made["config"] == {"Env": ["A=1"]}


@pytest.mark.parametrize(
    ("normalized_history", "diff_ids", "reason"),
    [
        ([BASE], ["sha256:base"], "the built image has 2 history entries, its normalised image 1"),
        ([BASE, {"created_by": "x"}], ["sha256:base"], "history names 2 layers, the normalised image has 1"),
    ],
)
def test_configs_of_two_builds_make_no_cache_image(
    normalized_history: list[dict[str, Any]], diff_ids: list[str], reason: str
) -> None:
    built = config([BASE, {"created_by": "x"}], ["sha256:base", "sha256:b1"])
    with pytest.raises(NormalizeFailure, match=reason):
        cache_config(built, config(normalized_history, diff_ids))
    with pytest.raises(NormalizeFailure, match="cannot make a layer cache image"):
        cache_config(built, b"{}")


def test_a_layer_is_taken_as_it_is_only_as_the_normalised_layer_of_a_step_with_the_same_epoch_and_pinning() -> None:
    made = LayerNote(built="sha256:chain", epoch=100, pinned=False, diff_id="sha256:n1")
    step = LayerNote(built="sha256:other-chain", epoch=100, pinned=False, diff_id="")
    assert made.made("sha256:n1", step)
    assert not made.made("sha256:b1", step)  # a built layer: rewritten
    assert not made.made("sha256:n1", LayerNote(built="sha256:c", epoch=101, pinned=False, diff_id=""))
    assert not made.made("sha256:n1", LayerNote(built="sha256:c", epoch=100, pinned=True, diff_id=""))
    assert not LayerNote(built="sha256:c", epoch=100, pinned=False, diff_id="").made("", step)  # dropped

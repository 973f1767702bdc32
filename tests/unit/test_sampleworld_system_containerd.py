"""Docker CE's layout in the sample world (sampleworld/system_containerd.py) without starting anything:
what containerd and dockerd are given, and that imagebuild finds that containerd's root by itself."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from imagebuild.importer import containerd_root
from sampleworld.layout import StateDir
from sampleworld.system_containerd import layout

STATE = StateDir(Path("/state/.sampleworld"))


def test_containerd_runs_from_a_config_of_its_own_and_dockerd_is_given_only_its_socket() -> None:
    containerd, engine = layout(STATE)
    config = tomllib.loads(containerd.config_text())
    assert config["root"] == str(containerd.content_root)
    assert config["grpc"]["address"] == str(containerd.socket)
    assert config["disabled_plugins"] == ["io.containerd.grpc.v1.cri"]  # as containerd.io's config.toml
    assert not containerd.content_root.is_relative_to(engine.data_root)  # not where dockerd's own would be
    assert len(str(containerd.socket)) < 100  # a unix socket's path limit
    daemon = json.loads(engine.daemon_config)
    assert daemon == {"containerd": str(containerd.socket), "features": {"containerd-snapshotter": True}}
    assert engine.storage_driver == ""  # the containerd image store picks its snapshotter


def test_imagebuild_finds_that_root_from_the_containerd_command_line_the_sample_world_starts(tmp_path: Path) -> None:
    containerd, _ = layout(StateDir(tmp_path))
    containerd.root.mkdir(parents=True)
    containerd.config.write_text(containerd.config_text())
    assert containerd_root.root_of(list(containerd.argv(tmp_path / "bin" / "containerd"))) == containerd.content_root

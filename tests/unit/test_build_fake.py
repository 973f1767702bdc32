"""build_image on the FakeEngine: recorded sample-world streams, replayed against a fake clock.

The recordings (tests/data/build_streams/) are real classic-builder streams of
the sample-world build; re-record them with the script there after changing
stages/ (the first test says when).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.build.checkout_labels import checkout_build_args, checkout_labels, image_labels, public_url
from imagebuild.build.core import BuildOptions, BuildRecord, build_image, prepare_build
from imagebuild.build.progress import BuildProgress
from imagebuild.errors import AttestationError, BuildError, ConfigError, EngineError
from imagebuild.inputs.layout import (
    ARCH_LABEL,
    CHECKOUT_LABEL_ARGS,
    INPUTS_LABEL,
    OCI_LABEL_PREFIX,
    OCI_LABELS,
    PIN_LABEL_PREFIX,
    SBOM_LABEL,
)
from imagebuild.project import Inputs, Project, find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.render.context import build_context
from imagebuild.render.labels import label_block
from imagebuild.testing import FakeClock, FakeEngine, Recording
from sampleworld.layout import BAD_SHA

Replay = Callable[..., tuple[FakeEngine, BuildRecord]]  # the replay fixture (tests/unit/conftest.py)

REPO = Path(__file__).resolve().parents[2]
TAG = "imagebuild-test/fake:gfx942"  # what the replay fixture tags


def sample(pins: Path) -> tuple[Project, Inputs]:
    project = find_project(REPO, pins)
    return project, project.load("gfx942")


@pytest.mark.parametrize("name", ["success", "cached", "engine-lost"])
def test_recordings_match_the_dockerfile_the_stages_render(name: str, build_streams: Path) -> None:
    _, inputs = sample(build_streams / "pins.toml")
    text = render_inputs(inputs, RenderOptions()).text
    recorded = Recording.load(build_streams / f"{name}.jsonl").dockerfile_sha256
    assert hashlib.sha256(text.encode()).hexdigest() == recorded, (
        "stages/ changed since the build streams were recorded: "
        "re-record them with `python tests/data/build_streams/record.py`"
    )


def test_success_times_every_step_tags_once_and_writes_the_record(tmp_path: Path, replay: Replay) -> None:
    engine, record = replay("success")
    assert [t.number for t in record.steps] == list(range(1, 19))
    assert not any(t.cached for t in record.steps)  # recorded with --no-cache
    assert engine.tags == {TAG: record.image_id}
    assert record.image_id.startswith("sha256:")
    # Step times come from the recorded stream: the cold build's MoRI step took seconds.
    assert record.steps[3].seconds > 1.0
    assert sum(t.seconds for t in record.steps) <= record.total_seconds
    written = json.loads((tmp_path / "record.json").read_text())
    assert written["image_id"] == record.image_id
    assert written["steps"][6]["title"] == "vLLM fork, full source compile"
    log = (tmp_path / "build.log").read_text()
    assert re.search(r"^Step (\d+)/\1 : LABEL ", log, re.MULTILINE)  # the labels: one last instruction
    assert "Successfully built" in log


def test_the_build_sends_the_rendered_context_with_the_checkout_labels_as_build_args(
    replay: Replay, build_streams: Path
) -> None:
    """One context: the files `imagebuild render --output DIR` writes, byte for byte, and no more."""
    engine, record = replay("success")
    (request,) = engine.requests
    assert request.network_mode == "host"
    assert not request.no_cache
    assert request.labels == {}  # the labels are the Dockerfile's LABEL, not build options
    project, inputs = sample(build_streams / "pins.toml")
    dockerfile = render_inputs(inputs, RenderOptions())
    context = build_context(dockerfile, inputs)
    with tarfile.open(fileobj=io.BytesIO(request.context)) as tar:
        sent = {
            m.name: (tar.extractfile(m).read(), m.mode)  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }
    assert sent == {f.path: (f.data, f.mode) for f in context.files}
    # The checkout's labels reach the Dockerfile's LABEL as build args; the rest is in the file.
    checkout = {label: record.labels[label] for label in CHECKOUT_LABEL_ARGS}
    assert request.build_args == checkout_build_args(checkout)
    assert record.labels == context.labels | checkout
    assert image_labels(project, inputs).items() <= record.labels.items()
    assert record.labels[SBOM_LABEL] == "gfx942.sbom.cdx.json"
    assert record.labels[INPUTS_LABEL] == context.inputs_digest


def test_cached_rebuild_is_detected_step_by_step(replay: Replay) -> None:
    _, record = replay("cached")
    assert record.all_cached
    assert [t.cached for t in record.steps] == [True] * 18


def test_failure_names_step_title_pins_and_tail_and_tags_nothing(
    tmp_path: Path, vllm_bad_pins: Path, build_streams: Path
) -> None:
    project, inputs = sample(vllm_bad_pins)
    engine = FakeEngine(builds=[Recording.load(build_streams / "failure.jsonl")], clock=FakeClock())
    options = BuildOptions(
        arch="gfx942", tag=TAG, record_path=tmp_path / "r.json", log_path=tmp_path / "b.log"
    )
    with pytest.raises(BuildError) as e:
        build_image(prepare_build(project, inputs, options), engine, clock=FakeClock())
    message = str(e.value)
    first = message.splitlines()[0]
    assert first.startswith(
        f"step 7/18 'vLLM fork, full source compile' failed (stages/07-vllm.toml; pins: vllm = {BAD_SHA})"
    )
    assert "returned a non-zero code: 128" in first
    assert "  | fatal: remote error: upload-pack: not our ref " + BAD_SHA in message
    assert "\x1b" not in message  # the builder's colour codes are not copied into the message
    assert message.endswith(f"full log: {tmp_path / 'b.log'}; nothing was tagged")
    assert engine.tags == {}
    assert not (tmp_path / "r.json").exists()
    assert "ERROR: The command" in (tmp_path / "b.log").read_text()


def test_engine_lost_mid_build_names_the_step_and_tags_nothing(tmp_path: Path, replay: Replay) -> None:
    with pytest.raises(EngineError) as e:
        replay("engine-lost")
    message = str(e.value)
    assert message.startswith("step 4/18 'Constraint proof, then MoRI from source' was interrupted")
    assert "lost the connection to the Docker engine" in message
    assert "nothing was tagged" in message
    assert e.value.exit_code == 3
    assert not (tmp_path / "record.json").exists()


def test_progress_lines_start_and_end_every_step_in_order(replay: Replay) -> None:
    out = io.StringIO()
    replay("cached", progress=BuildProgress(out))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"building {TAG} for gfx942 on fake://engine (")
    steps = [line for line in lines if line.startswith("[")]
    assert len(steps) == 36
    for n in range(1, 19):
        start, end = steps[2 * n - 2], steps[2 * n - 1]
        assert start.startswith(f"[{n}/18] ")
        assert start.endswith(" ...")
        assert end.startswith(start)
        assert end.endswith("(cached)")


def test_labels_outside_a_git_checkout_fall_back(project: Path, build_streams: Path) -> None:
    """The unit `project` fixture is a copy of the inputs outside any git checkout."""
    pins = project / "pins.toml"
    pins.write_text((build_streams / "pins.toml").read_text())
    found = find_project(project, pins)
    labels = image_labels(found, found.load("gfx942"))
    assert labels[f"{OCI_LABEL_PREFIX}revision"] == "unknown"
    assert labels[f"{OCI_LABEL_PREFIX}created"] == "unknown"
    assert labels[f"{OCI_LABEL_PREFIX}source"] == str(project)
    assert labels[ARCH_LABEL] == "gfx942"
    assert set(OCI_LABELS) <= {k.removeprefix(OCI_LABEL_PREFIX) for k in labels}
    for pin in found.load("gfx942").pins:
        assert labels[f"{PIN_LABEL_PREFIX}{pin.name}"] == pin.identity


CONTEXT_DIGEST = """
import hashlib, sys
from pathlib import Path
from imagebuild.render.context import build_context
from imagebuild.project import find_project
from imagebuild.render import RenderOptions, render
project = find_project(Path(sys.argv[1]), Path(sys.argv[2]))
inputs = project.load("gfx942")
lock = inputs.python_lock
dockerfile = render(inputs.definition, inputs.pins, inputs.arch, inputs.constraints, RenderOptions(), lock=lock,
                    apt_lock=inputs.apt_lock)
print(hashlib.sha256(build_context(dockerfile, inputs).tar()).hexdigest())
"""


def test_context_is_byte_identical_across_processes_and_hash_seeds(build_streams: Path) -> None:
    """Set and dict order must not leak into the tar: two interpreters, two hash seeds, one digest."""
    digests = set()
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", CONTEXT_DIGEST, str(REPO), str(build_streams / "pins.toml")],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=60,
        )
        digests.add(done.stdout.strip())
    assert len(digests) == 1, digests


@pytest.mark.parametrize(
    ("url", "public"),
    [
        ("https://user:ghp_abcdefghijkl@github.com/org/repo.git", "https://github.com/org/repo.git"),
        ("https://x-access-token:abc@example.com:8443/r.git", "https://example.com:8443/r.git"),
        # Token-only user info, and tokens in the query, as CI systems write them.
        ("https://ghp_abcdefghijklmnopqrstuvwxyz@github.com/o/r.git", "https://github.com/o/r.git"),
        ("https://gitlab.com/o/r.git?private_token=glpat-abcdefghijklmnopqrst", "https://gitlab.com/o/r.git"),
        ("https://host/r.git?X-Amz-Signature=abc#frag", "https://host/r.git"),
        ("https://[::1]:8443/r.git", "https://[::1]:8443/r.git"),
        ("oauth2:ghp_abcdefghijklmnopqrstuvwxyz@github.com:org/repo.git", "github.com:org/repo.git"),
        ("git@github.com:org/repo.git", "github.com:org/repo.git"),
        ("https://host:port/r.git", ""),  # not a URL to vouch for: the label falls back to the path
        ("", ""),
    ],
)
def test_the_source_label_carries_no_credentials(url: str, public: str) -> None:
    assert public_url(url) == public


def _git_checkout(project: Path, origin: str) -> None:
    for args in (["init", "-q"], ["remote", "add", "origin", origin]):
        subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True, timeout=30)


def test_the_origin_url_loses_its_credentials_before_it_becomes_a_label(
    project: Path, build_streams: Path
) -> None:
    token = "ghp_" + "T0k3n" * 8
    _git_checkout(project, f"https://ci:{token}@github.com/org/repo.git?access_token={token}")
    found = find_project(project, build_streams / "pins.toml")
    labels = image_labels(found, found.load("gfx942"))
    assert labels[f"{OCI_LABEL_PREFIX}source"] == "https://github.com/org/repo.git"
    assert token not in json.dumps(labels)


def test_a_checkout_label_with_a_control_character_is_refused(project: Path, build_streams: Path) -> None:
    # The checkout's labels reach the LABEL as build args: each is one line of text, like every
    # label. git config reads `\b` as a backspace, which urlsplit keeps (it drops newlines and tabs).
    _git_checkout(project, "https://example.com/org/repo.git")
    config = project / ".git" / "config"
    config.write_text(config.read_text().replace("org/repo.git", "org/repo.git\\b"))
    found = find_project(project, build_streams / "pins.toml")
    with pytest.raises(ConfigError, match=r"org\.opencontainers\.image\.source.*control character"):
        checkout_labels(found, "gfx942")


def test_a_label_that_looks_like_a_credential_is_refused(project: Path, build_streams: Path) -> None:
    # A token in the remote's path survives the stripping of user info and query: refused, not labelled.
    token = "ghp_" + "T0k3n" * 8
    _git_checkout(project, f"https://example.com/{token}/repo.git")
    found = find_project(project, build_streams / "pins.toml")
    with pytest.raises(
        ConfigError, match=r"image label org\.opencontainers\.image\.source contains a credential"
    ) as e:
        image_labels(found, found.load("gfx942"))
    assert token[4:] not in str(e.value)  # the message names it, redacted


def test_the_label_block_is_one_sorted_instruction_taken_literally_refusing_control_characters() -> None:
    block = label_block({"b": 'say "hi"', "a": "1", "c": "${HOME}"})
    label = block[block.index("\nLABEL ") + 1 :]
    pairs = re.findall(r'("(?:[^"\\]|\\.)*")=("(?:[^"\\]|\\.)*")', label)
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys)
    assert label.count("LABEL") == 1
    assert ('"a"', '"1"') in pairs
    assert ('"b"', '"say \\"hi\\""') in pairs
    assert ('"c"', '"\\${HOME}"') in pairs  # literal: docker expands $ in LABEL
    # The checkout's labels are the only references: to the build args the block declares.
    assert ('"org.opencontainers.image.revision"', '"${IMAGEBUILD_REVISION}"') in pairs
    assert 'ARG IMAGEBUILD_REVISION="unknown"' in block
    for bad in ("line\nbreak", "cr\rhere", "nul\x00", "del\x7f", "sep\u2028"):
        with pytest.raises(ConfigError, match="control characters"):
            label_block({"a": bad})


def test_a_cached_rebuild_keeps_the_sbom_and_provenance_that_describe_its_image(
    replay: Replay, tmp_path: Path
) -> None:
    _, first = replay("success")
    sbom, provenance = Path(first.sbom), Path(first.provenance)
    before = sbom.read_bytes(), provenance.read_bytes()
    # An engine that cannot save: the documents stand, so nothing is read from the image again.
    _, again = replay("cached", engine=FakeEngine(refuse_save="no save for a cached rebuild"))
    assert again.image_id == first.image_id
    assert (sbom.read_bytes(), provenance.read_bytes()) == before
    sbom.unlink()
    replay("cached")  # a missing document is made again
    assert sbom.is_file()


def test_documents_are_named_by_the_image_and_a_record_names_only_its_own(replay: Replay, tmp_path: Path) -> None:
    """Two builds of two images, each with its own --record in one directory: neither record names the
    other image's documents, and both sets stay, mode 0644."""
    from dataclasses import replace

    previous = os.umask(0o022)
    try:
        _, first = replay("success", record_path=tmp_path / "a.build.json")
        recording = Recording.load(REPO / "tests" / "data" / "build_streams" / "success.jsonl")
        other_id = "sha256:" + "e" * 64
        messages = tuple(
            replace(m, chunk={"aux": {"ID": other_id}}) if m.chunk and "aux" in m.chunk else m
            for m in recording.messages
        )
        _, second = replay(replace(recording, messages=messages), record_path=tmp_path / "b.build.json")
    finally:
        os.umask(previous)
    assert second.image_id == other_id != first.image_id
    for record in (first, second):
        short = record.image_id.removeprefix("sha256:")[:12]
        assert record.sbom.name == f"gfx942-{short}.sbom.cdx.json"
        assert record.provenance.name == f"gfx942-{short}.provenance.intoto.json"
        written = json.loads(record.sbom.with_name(f"{'a' if record is first else 'b'}.build.json").read_text())
        assert written["sbom"] == str(record.sbom)
        assert written["attestations"] == [str(record.sbom), str(record.provenance)]
        assert json.loads(record.sbom.read_text())["metadata"]["component"]["version"] == record.image_id
        for path in (record.sbom, record.provenance):
            assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert first.sbom != second.sbom
    assert first.sbom.is_file()


def test_the_sbom_lists_the_dpkg_packages_and_distributions_the_built_layers_hold(replay: Replay) -> None:
    engine, record = replay("success")
    assert engine.runs == []  # nothing runs in the image: its layers are read
    sbom = json.loads(record.sbom.read_text())
    refs = {c["bom-ref"] for c in sbom["components"]}
    assert {"deb:bash:amd64", "deb:libc6:amd64", "os"} <= refs
    assert "python:/usr/lib/python3/dist-packages/amd-mori@1.2.2" in refs


def test_a_credential_a_step_prints_never_reaches_the_build_log(replay: Replay, tmp_path: Path) -> None:
    from dataclasses import replace

    from imagebuild.testing import RecordedMessage

    token = "ghp_" + "Pr1nt" * 8
    recording = Recording.load(REPO / "tests" / "data" / "build_streams" / "success.jsonl")
    leak = RecordedMessage(at=0.0, chunk={"stream": f"fatal: https://ci:{token}@github.com/x: denied\n"})
    leaky = replace(recording, messages=(recording.messages[0], leak, *recording.messages[1:]))
    shown = io.StringIO()
    replay(leaky, progress=BuildProgress(shown, verbose=True))
    log = (tmp_path / "build.log").read_text()
    assert "fatal: https://ci:<redacted>@github.com/x: denied" in log
    assert token not in log
    assert token not in shown.getvalue()


def test_an_image_whose_layers_cannot_be_read_after_a_good_build_is_exit_9_naming_the_tagged_image(
    replay: Replay,
) -> None:
    engine = FakeEngine(refuse_save="Error response from daemon: write /var/lib/docker/tmp: no space left on device")
    with pytest.raises(AttestationError) as raised:
        replay("success", engine=engine)
    assert raised.value.exit_code == 9
    (line,) = str(raised.value).splitlines()
    assert line.startswith(f"built and tagged {TAG} (sha256:")
    assert "; the SBOM could not be made: " in line
    assert line.endswith("no space left on device")
    assert TAG in engine.tags  # the image stays built and tagged

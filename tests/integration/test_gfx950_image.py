"""The gfx950 (MI355X) image for real: `imagebuild build --arch gfx950` against the sample world,
`imagebuild verify` with gfx950's expectations, and a `slurm --arch gfx950` job from its record,
run single-node at TP 8 on the sample cluster.

The sample world stands in for what differs on gfx950: the MI355X donor (pinned by digest, its
trees built for gfx942;gfx950, its own flydsl) and a vLLM that compiles for the arch it is given.
The build runs once per session (conftest's sample_image_gfx950); its steps 1-3 are gfx942's.
"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.errors import ExitCode
from imagebuild.inputs.layout import LAUNCHER
from imagebuild.project import find_project
from sampleworld.cluster import Cluster
from sampleworld.world import World
from tests import REPO
from tests.integration.cluster_support import (
    JobDirs,
    benchmark_results,
    job_containers,
    lines_of,
    publish_sample,
    render_job,
    submit_and_wait,
)
from tests.integration.image_support import remove_images

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]

# What the image's own python says about the graft and vLLM (never imports aiter: it needs a GPU).
FACTS = (
    "import json, pathlib, flydsl, vllm; "
    "site = pathlib.Path(flydsl.__file__).parent.parent; "
    "print(json.dumps({'vllm_arch': vllm.PYTORCH_ROCM_ARCH, 'flydsl': flydsl.__version__, "
    "'flydsl_donor_only': (site / 'flydsl' / '_donor_only.py').is_file(), "
    "'flydsl_dist_infos': sorted(p.name for p in site.glob('flydsl*.dist-info')), "
    "'hsaco': sorted(p.name for p in (site / 'aiter_meta' / 'hsaco').iterdir()), "
    "'versions': pathlib.Path('/app/versions.txt').read_text()}))"
)


def _json_out(code: int, out: str) -> dict[str, object]:
    """The one JSON document a command in the image printed (the engine gives stdout and stderr as one)."""
    assert code == 0, out
    data: dict[str, object] = json.loads(out[out.index("{") : out.rindex("}") + 1])
    return data


def test_17_steps_the_mi355x_donor_and_no_repin(
    sample_image_gfx950: dict[str, object], gfx950_pins: Path, engine: DockerEngine
) -> None:
    record = sample_image_gfx950
    steps = record["steps"]
    assert isinstance(steps, list)
    assert [s["number"] for s in steps] == list(range(1, 18))
    assert steps[13]["title"] == "Graft flydsl (the donor's, kept: no re-pin on gfx950)"
    assert "flydsl over the graft" not in [s["title"] for s in steps]
    info = engine.inspect_image(str(record["tag"]))
    assert info.id == record["image_id"]
    assert info.labels["io.imagebuild.arch"] == "gfx950"
    pins = find_project(REPO, gfx950_pins).load("gfx950").pins
    donor = pins.image("donor_mi355x")
    assert donor.image.endswith("/vllm/vllm-openai-rocm")
    assert (donor.tag, donor.platform_digest is not None) == ("kimi-k3", True)
    for pin in pins:
        assert info.labels[f"io.imagebuild.pin.{pin.name}"] == pin.identity
    assert not {"io.imagebuild.pin.donor", "io.imagebuild.pin.flydsl"} & set(info.labels)
    facts = _json_out(*engine.run(str(record["tag"]), ["python3", "-c", FACTS]))
    # vLLM compiled for the profile's one arch (the stand-in refuses the base's three).
    assert facts["vllm_arch"] == "gfx950"
    # The donor's flydsl, kept: its code, no metadata over it, no re-pin line.
    assert (facts["flydsl"], facts["flydsl_donor_only"], facts["flydsl_dist_infos"]) == ("0.2.2", True, [])
    assert facts["hsaco"] == ["gfx942", "gfx950"]  # the grafted trees are built for gfx942;gfx950
    versions = str(facts["versions"])
    assert "FLYDSL_REPIN" not in versions
    assert "AITER_GRAFT=proven_k3 (kimik3 tuned fmoe configs)" in versions
    assert f"VLLM_REF={pins.get('vllm').identity}" in versions


def test_the_image_launcher_plans_the_mi355x_recipe(
    sample_image_gfx950: dict[str, object], engine: DockerEngine
) -> None:
    """MLA on, no int4 requantisation, 40e9 bytes of KV cache, TP 8 on one node."""
    env = ["env", "MODEL_PATH=/models/kimi-k3", "NODE_RANK=0", "VARIANT=tp8"]
    plan = _json_out(
        *engine.run(str(sample_image_gfx950["tag"]), [*env, "python3", LAUNCHER, "--dry-run", "--json"])
    )
    recipe_env = plan["env"]
    assert isinstance(recipe_env, dict)
    assert (recipe_env["VLLM_ROCM_USE_AITER_MLA"], recipe_env["GPU_ARCHS"]) == ("1", "gfx950")
    assert recipe_env["KV_CACHE_MEMORY_BYTES"] == "40000000000"
    assert "AITER_SITUV2_A8W4" not in recipe_env
    argv = plan["argv"]
    assert isinstance(argv, list)
    assert "--quantization-config" not in argv
    for flag, value in (
        ("--tensor-parallel-size", "8"),
        ("--pipeline-parallel-size", "1"),
        ("--nnodes", "1"),
    ):
        assert argv[argv.index(flag) + 1] == value
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "40000000000"
    assert (plan["variant"], plan["nnodes"]) == ("tp8", 1)


def test_shares_the_base_and_steps_1_to_3_with_the_gfx942_image(
    sample_image_gfx950: dict[str, object],
    sample_image: dict[str, object],
    locked_pins: Path,
    engine: DockerEngine,
) -> None:
    """The first arch-specific value is step 4's ARG: everything below it is one set of layers."""
    gfx950 = engine.inspect_image(str(sample_image_gfx950["image_id"])).layers
    gfx942 = engine.inspect_image(str(sample_image["image_id"])).layers
    shared = next(i for i, (a, b) in enumerate(zip(gfx950, gfx942, strict=False)) if a != b)
    inputs = find_project(REPO, locked_pins).load("gfx942")
    base = engine.inspect_image(inputs.pins.image(inputs.definition.base_pin).reference).layers
    assert gfx950[: len(base)] == base
    assert shared > len(base), "the COPY of step 3 (rootfs/) is not shared with gfx942's"


def test_verify_passes_with_gfx950_s_expectations(
    sample_image_gfx950: dict[str, object],
    gfx950_pins: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    junit = tmp_path / "junit.xml"
    argv = ["verify", str(sample_image_gfx950["tag"]), "--arch", "gfx950", "--pins", str(gfx950_pins)]
    assert main([*argv, "--junit", str(junit)]) == 0
    out = capsys.readouterr().out
    assert "arch gfx950): PASSED" in out
    cases = {(c.get("classname"), c.get("name")): c for c in ET.parse(junit).iter("testcase")}
    skipped = {key: c.find("skipped") for key, c in cases.items() if c.find("skipped") is not None}
    # The profile keeps the donor's flydsl: the re-pin's checks are skipped, saying why ...
    for name in ("test_single_dist_info", "test_dist_version", "test_record"):
        reason = skipped[("test_graft", name)]
        assert reason is not None
        assert reason.get("message") == "arch gfx950 keeps the donor's flydsl (no re-pin)"
    # ... and the kept tree is checked instead; the single-node head's dry run is the launcher's case.
    assert ("test_graft", "test_kept_tree_has_no_foreign_metadata") not in skipped
    assert ("test_launcher", "test_dry_run_argv[head]") in cases
    assert ("test_launcher", "test_dry_run_argv[worker]") not in cases
    assert ("test_config", "test_label[io.imagebuild.pin.donor_mi355x]") in cases
    failed = [key for key, c in cases.items() if c.find("failure") is not None or c.find("error") is not None]
    assert failed == []


def test_verify_catches_metadata_over_the_kept_flydsl(
    sample_image_gfx950: dict[str, object],
    gfx950_pins: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A flydsl dist-info over the donor's tree (as a base that ships flydsl would leave one: graft
    prep removes flydsl/, not its dist-info) is the metadata-vs-code mismatch of the re-pin's case."""
    site = find_project(REPO, gfx950_pins).load("gfx950").pins.image("base").site_packages
    info = f"{site}/flydsl-0.2.4.dist-info"
    dockerfile = (
        f"FROM {sample_image_gfx950['image_id']}\n"
        f"RUN mkdir -p {info} && printf 'Metadata-Version: 2.1\\nName: flydsl\\nVersion: 0.2.4\\n' > {info}/METADATA\n"
    )
    tag = f"{sample_image_gfx950['tag']}-broken"
    built = subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input=dockerfile,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    try:
        argv = ["verify", tag, "--arch", "gfx950", "--pins", str(gfx950_pins), "-k", "graft"]
        assert main(argv) == ExitCode.VERIFY_FAILED
        out = capsys.readouterr().out
        assert "FAILED graft: test_kept_tree_has_no_foreign_metadata" in out
        assert f"{info} (0.2.4)" in out
    finally:
        remove_images(tag)


@pytest.fixture(scope="module")
def published_record(
    sample_image_gfx950: dict[str, object], world: World, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A copy of the gfx950 build record with `imagebuild publish` to the sample registry noted in it."""
    record = tmp_path_factory.mktemp("gfx950-record") / "gfx950.build.json"
    record.write_text(json.dumps(sample_image_gfx950))
    publish_sample(world, str(sample_image_gfx950["image_id"]), "--record", str(record))
    return record


def test_slurm_job_from_the_record_is_single_node_tp8(published_record: Path, tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    argv = ["slurm", "--from-record", str(published_record), "--nodes", "1", "--variant", "tp8"]
    assert main([*argv, "--model-path", "/models/kimi-k3", "-o", str(script)]) == 0
    text = script.read_text()
    assert "#SBATCH --nodes=1\n" in text
    assert "    VARIANT=tp8\n" in text
    assert "variant tp8, on 1 node (TP 8 x PP 1, 8 GPUs per node)" in text
    published = json.loads(published_record.read_text())["published"]
    assert f"    IMAGE={published[-1]}\n" in text
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    # The 2-node variants of gfx942's recipe are not gfx950's.
    assert main([*argv[:-1], "pp2xtp8", "--model-path", "/models/kimi-k3", "-o", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_the_job_serves_tp8_on_one_node_of_the_sample_cluster(
    sample_cluster: Cluster, published_record: Path, tmp_path: Path
) -> None:
    dirs = JobDirs.create(tmp_path)
    render_job(sample_cluster, dirs, "--from-record", str(published_record), nodes=1, variant="tp8")
    result = submit_and_wait(sample_cluster, dirs)
    print(f"gfx950 tp8 job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s")
    assert (result.state, result.exit_code) == ("COMPLETED", "0:0"), result.output
    head = lines_of(result, 0)
    assert "INFO:     Application startup complete." in head
    assert not lines_of(result, 1)  # one node, one task
    models, _ = benchmark_results(result)
    assert models == ["kimi-k3"]
    assert (result.log_dir / "node0.exit").read_text().strip() == "0"
    assert [p.name for p in result.log_dir.glob("colocated_bench_NODE*.log")] == ["colocated_bench_NODE0.log"]
    for node in sample_cluster.nodes:
        assert job_containers(sample_cluster, node) == []

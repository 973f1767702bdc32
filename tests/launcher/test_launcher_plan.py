"""The launcher's decisions, without starting anything: recipe, env precedence, argv, topology, CLI.

Set UPDATE_GOLDEN=1 to rewrite the golden argv files, then review the diff by eye.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagebuild.launcher import serve
from imagebuild.launcher.inputs import INPUTS, RECIPE_INPUTS
from imagebuild.launcher.plan import resolve_plan
from imagebuild.launcher.recipes import load_recipe, recipes_dir
from tests.launcher.launcher_support import GOLDEN_DIR, LAUNCHER, LAUNCHER_PYTHON, argv_section, k3_env

K3_ENV = {
    "EP_TP_SIZE": "2", "GPU_ARCHS": "gfx942", "VLLM_USE_V1": "1", "VLLM_ROCM_USE_AITER": "1",
    "VLLM_ROCM_USE_AITER_MOE": "1", "VLLM_ROCM_USE_AITER_MLA": "0", "VLLM_ROCM_USE_AITER_RMSNORM": "1",
    "VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS": "0", "VLLM_USE_AITER_TRITON_SILU_MUL": "0",
    "AITER_SITUV2_A8W4": "1", "VLLM_SSM_CONV_STATE_LAYOUT": "DS", "KV_BLOCK_SIZE": "16",
    "KV_CACHE_DTYPE": "fp8", "KV_CACHE_MEMORY_BYTES": "40000000000", "GPU_MEMORY_UTILIZATION": "0.88",
    "PREFILL_CUDAGRAPH_MODE": "NONE", "DECODE_CUDAGRAPH_MODE": "PIECEWISE",
    "VLLM_ALL2ALL_BACKEND": "mori_high_throughput", "PREFILL_MORI_BACKEND": "mori_high_throughput",
    "DECODE_MORI_BACKEND": "mori_low_latency", "MORI_SHMEM_HEAP_SIZE": "17179869184",
    "MORI_NUM_QP_PER_PE": "8", "VLLM_MORIIO_QP_PER_TRANSFER": "2", "VLLM_MORIIO_NUM_WORKERS": "4",
    "VLLM_ENGINE_READY_TIMEOUT_S": "3600", "DISTRIBUTED_TIMEOUT_SECONDS": "7200",
}  # fmt: skip
VARIANTS = ("pp2xtp8", "allgather", "moriep")


def dry_run(capsys: pytest.CaptureFixture[str], env: dict[str, str], *args: str) -> tuple[int, str, str]:
    code = serve.main(["--dry-run", *args], env)
    out, err = capsys.readouterr()
    return code, out, err


def plan_json(capsys: pytest.CaptureFixture[str], env: dict[str, str], *args: str) -> dict[str, Any]:
    code, out, err = dry_run(capsys, env, "--json", *args)
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document


@pytest.mark.parametrize("role", ["head", "worker"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_argv_matches_golden(capsys: pytest.CaptureFixture[str], variant: str, role: str) -> None:
    env = k3_env(VARIANT=variant, NODE_RANK="0" if role == "head" else "1")
    code, out, err = dry_run(capsys, env)
    assert code == 0, err
    golden = GOLDEN_DIR / f"kimi-k3-{variant}-{role}.argv"
    text = "\n".join(argv_section(out)) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text()


def test_variants_differ_only_in_expert_parallel_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argvs = {variant: plan_json(capsys, k3_env(VARIANT=variant))["argv"] for variant in VARIANTS}
    base = argvs["pp2xtp8"]
    for variant, backend in (("allgather", "allgather_reducescatter"), ("moriep", "mori_low_latency")):
        cut = base.index("--port")
        assert argvs[variant] == [
            *base[:cut],
            "--enable-expert-parallel",
            "--all2all-backend",
            backend,
            *base[cut:],
        ]
    recipe = load_recipe("kimi-k3", recipes_dir({}))
    assert {name: dict(settings) for name, settings in recipe.variants.items()} == {
        "pp2xtp8": {"ENABLE_EP": "0", "ALL2ALL_BACKEND": "none"},
        "allgather": {"ENABLE_EP": "1", "ALL2ALL_BACKEND": "allgather_reducescatter"},
        "moriep": {"ENABLE_EP": "1", "ALL2ALL_BACKEND": "mori_low_latency"},
    }


def test_quantization_config_is_one_argv_element_of_valid_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = plan_json(capsys, k3_env(VARIANT="moriep"))["argv"]
    assert argv.count("--quantization-config") == 1
    value = argv[argv.index("--quantization-config") + 1]
    assert json.loads(value) == {"moe": {"weight": "int4_per_group_32"}}


def test_recipe_env_is_the_26_k3_keys_plus_what_the_benchmark_needs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = plan_json(capsys, k3_env())["env"]
    assert len(K3_ENV) == 26
    assert env == {
        **K3_ENV,
        "SERVED_MODEL_NAME": "kimi-k3",
        "NIAH_MODEL": "kimi-k3",
        "SERVE_PORT": "8000",
        "PYTHONUNBUFFERED": "1",
    }


def test_submit_time_env_wins_over_the_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    env = k3_env(GPU_MEMORY_UTILIZATION="0.8", KV_CACHE_DTYPE="auto", DISTRIBUTED_TIMEOUT_SECONDS="600")
    plan = plan_json(capsys, env)
    argv = plan["argv"]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.8"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "auto"
    assert argv[argv.index("--distributed-timeout-seconds") + 1] == "600"
    assert argv[argv.index("--cpu-distributed-timeout-seconds") + 1] == "600"
    assert plan["env"]["GPU_MEMORY_UTILIZATION"] == "0.8"
    assert plan["env"]["MORI_NUM_QP_PER_PE"] == "8"  # untouched keys keep the recipe's value
    assert plan["overridden_recipe_env"] == {
        "GPU_MEMORY_UTILIZATION": "0.88",
        "KV_CACHE_DTYPE": "fp8",
        "DISTRIBUTED_TIMEOUT_SECONDS": "7200",
    }
    _, text, _ = dry_run(capsys, env)
    assert "# GPU_MEMORY_UTILIZATION: the submit-time value wins over the recipe's 0.88" in text
    assert "===ENV GPU_MEMORY_UTILIZATION=0.8" in text.splitlines()


def test_submit_time_inputs_win_over_recipe_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_json(
        capsys, k3_env(NNODES="4", PP_SIZE="4", ENABLE_EP="1", ALL2ALL_BACKEND="mori_low_latency")
    )
    argv = plan["argv"]
    assert argv[argv.index("--nnodes") + 1] == "4"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "4"
    assert plan["variant"] == "moriep"  # matched from the inputs, as the cluster scripts pass them


def test_topology_mismatch_is_rejected_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = dry_run(capsys, k3_env(NNODES="1"))
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "topology mismatch: TP_SIZE x PP_SIZE = 8 x 2 = 16 GPUs" in lines[0]
    assert "NNODES x GPUS_PER_NODE = 1 x 8 = 8" in lines[0]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"MODEL_PATH": ""}, "MODEL_PATH is not set"),
        ({"MASTER_ADDR": ""}, "MASTER_ADDR is not set and NNODES=2"),
        ({"NODE_RANK": "2"}, "NODE_RANK='2' must be an integer in 0..1"),
        ({"ENABLE_EP": "maybe"}, "ENABLE_EP='maybe' is not a boolean"),
        ({"ALL2ALL_BACKEND": "mori_low_latency"}, "needs expert parallelism: set ENABLE_EP=1"),
        ({"VARIANT": "moriEP"}, "has no variant 'moriEP'"),
        ({"VARIANT": "moriep", "ENABLE_EP": "0"}, "ENABLE_EP=0 contradicts variant 'moriep'"),
        ({"RECIPE": "kimi-k4"}, "unknown recipe 'kimi-k4'"),
        ({"GPU_MEMORY_UTILIZATION": "88"}, "GPU_MEMORY_UTILIZATION='88' must be a number in (0, 1]"),
        (
            {"EXTRA_SERVE_ARGS": "--x 'unclosed"},
            'EXTRA_SERVE_ARGS="--x \'unclosed" cannot be split into words',
        ),
    ],
)
def test_bad_input_names_the_variable(
    capsys: pytest.CaptureFixture[str], overrides: dict[str, str], message: str
) -> None:
    code = serve.main(["--json"], k3_env(**overrides))
    _, err = capsys.readouterr()
    assert code == 2
    assert message in err


def test_bad_dry_run_value_is_an_error_not_a_serve(capsys: pytest.CaptureFixture[str]) -> None:
    assert serve.main([], k3_env(DRY_RUN="maybe")) == 2
    assert "DRY_RUN='maybe' is not a boolean: set DRY_RUN to 1 or 0" in capsys.readouterr().err


def test_unknown_variant_suggests_the_close_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = dry_run(capsys, k3_env(), "--variant", "moriEP")
    assert code == 2
    assert "Perhaps you meant moriep?" in err


def test_flags_override_env_for_recipe_and_variant(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_json(capsys, k3_env(VARIANT="pp2xtp8"), "--variant", "allgather", "--recipe", "kimi-k3")
    assert plan["variant"] == "allgather"
    assert "--all2all-backend" in plan["argv"]


def test_extra_args_come_last_env_then_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    env = k3_env(EXTRA_SERVE_ARGS='["--kv-transfer-config", "{\\"kv_role\\": \\"kv_both\\"}"]')
    argv = plan_json(capsys, env, "--", "--enforce-eager")["argv"]
    assert argv[-3:] == ["--kv-transfer-config", '{"kv_role": "kv_both"}', "--enforce-eager"]
    env = k3_env(EXTRA_SERVE_ARGS="--max-num-seqs 4 --hf-overrides '{\"a\": 1}'")
    assert plan_json(capsys, env)["argv"][-4:] == ["--max-num-seqs", "4", "--hf-overrides", '{"a": 1}']


def test_dry_run_env_variable_equals_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert serve.main([], k3_env(DRY_RUN="1")) == 0
    by_env = capsys.readouterr().out
    _, by_flag, _ = dry_run(capsys, k3_env())
    assert by_env == by_flag
    assert "===ENV VLLM_ROCM_USE_AITER_MLA=0" in by_env
    assert "# benchmark: none, wait for vLLM to exit" in by_env


def test_served_name_defaults_to_the_model_directory_name(capsys: pytest.CaptureFixture[str]) -> None:
    env = k3_env(MODEL_NAME="", MODEL_PATH="/models/moonshotai/Kimi-K3/")
    plan = plan_json(capsys, env)
    assert plan["served_model_name"] == "Kimi-K3"
    assert plan["env"]["NIAH_MODEL"] == plan["env"]["SERVED_MODEL_NAME"] == "Kimi-K3"


def test_log_dir_and_sentinel_follow_log_root_and_job(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_json(capsys, k3_env(NODE_RANK="1", LOG_ROOT="/shared/logs"))
    assert plan["log_file"] == "/shared/logs/12345/colocated_bench_NODE1.log"
    assert plan["sentinel"] == "/shared/logs/12345/.shutdown"
    assert plan_json(capsys, k3_env(SLURM_JOB_ID=""))["sentinel"] == "/run_logs/local/.shutdown"


def test_ready_timeout_is_the_references_log_wait_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_json(capsys, k3_env())["ready_timeout_s"] == 4000
    assert plan_json(capsys, k3_env(LOG_WAIT_TIMEOUT_SECONDS="60"))["ready_timeout_s"] == 60
    assert plan_json(capsys, k3_env(READY_TIMEOUT_S="5"))["ready_timeout_s"] == 5  # the earlier name


def write_recipe(directory: Path, text: str) -> dict[str, str]:
    directory.mkdir(exist_ok=True)
    (directory / "r.toml").write_text(text)
    return k3_env(LAUNCHER_RECIPES_DIR=str(directory), RECIPE="r", NNODES="1", MASTER_ADDR="")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('serve_flag = ["--x"]', "unknown key 'serve_flag' (known: description, serve_flags"),
        ('serve_flag = ["--x"]', "Perhaps you meant serve_flags?"),
        ('serve_flags = "--x 1"', "serve_flags must be an array of strings"),
        ('serve_flags = ["--port", "1"]', "serve_flags has --port, which the launcher sets itself"),
        ("[env]\nKV_BLOCK_SIZE = 16", 'KV_BLOCK_SIZE = 16 must be a string: write KV_BLOCK_SIZE = "16"'),
        ('[env]\nTP_SIZE = "8"', "TP_SIZE is a launcher input: move it to [inputs]"),
        ('[inputs]\nNODES = "2"', "NODES is not an input a recipe may set"),
        ('[variants.a]\nENABLE_EPP = "1"', "Perhaps you meant ENABLE_EP?"),
        ("serve_flags = [", "cannot read the recipe"),
    ],
)
def test_recipe_files_are_validated(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    code, _, err = dry_run(capsys, write_recipe(tmp_path / "recipes", text))
    assert code == 2
    assert message in err


def test_a_recipe_may_leave_out_optional_kv_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env = write_recipe(tmp_path / "recipes", '[env]\nGPU_MEMORY_UTILIZATION = "0.9"\n')
    code, _, err = dry_run(capsys, env)
    assert code == 2
    assert "DISTRIBUTED_TIMEOUT_SECONDS is not set: give it in the recipe's [env]" in err
    plan = plan_json(capsys, {**env, "DISTRIBUTED_TIMEOUT_SECONDS": "60"})
    assert plan["argv"] == [
        "vllm", "serve", "/models/moonshotai/Kimi-K3", "--served-model-name", "kimi-k3",
        "--tensor-parallel-size", "8", "--pipeline-parallel-size", "1",
        "--distributed-executor-backend", "mp", "--nnodes", "1", "--node-rank", "0",
        "--master-addr", "127.0.0.1", "--master-port", "29500", "--trust-remote-code",
        "--gpu-memory-utilization", "0.9", "--distributed-timeout-seconds", "60",
        "--cpu-distributed-timeout-seconds", "60", "--port", "8000",
    ]  # fmt: skip


def test_every_recipe_settable_input_can_be_matched_against_variants() -> None:
    inputs = resolve_plan(k3_env()).inputs
    assert set(inputs.recipe_settable()) == set(RECIPE_INPUTS)


def test_launcher_imports_only_the_standard_library_and_itself() -> None:
    package = LAUNCHER.parent
    own = {path.stem for path in package.glob("*.py")}
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text())
        modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                   for alias in node.names}  # fmt: skip
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                # Relative imports only: an absolute `imagebuild...` import would fail in the image.
                if node.level:
                    assert (node.module or "").split(".")[0] in own, (path.name, node.module)
                else:
                    modules.add((node.module or "").split(".")[0])
        assert modules - {"__future__"} <= sys.stdlib_module_names, path.name


def run_standalone(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # -I: no PYTHONPATH, no user site, no script directory on sys.path; cwd far from the repo.
    return subprocess.run(
        [LAUNCHER_PYTHON, "-I", str(LAUNCHER), *args],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
        timeout=20,
    )


def test_runs_as_a_script_outside_the_repo() -> None:
    result = run_standalone("--dry-run", env=k3_env(VARIANT="moriep"))
    assert result.returncode == 0, result.stderr
    golden = (GOLDEN_DIR / "kimi-k3-moriep-head.argv").read_text()
    assert "\n".join(argv_section(result.stdout)) + "\n" == golden


def test_help_lists_inputs_and_recipes() -> None:
    result = run_standalone("--help", env={})
    assert result.returncode == 0, result.stderr
    for spec in INPUTS:
        assert f"\n  {spec.name} " in result.stdout
    assert "kimi-k3 " in result.stdout
    for variant in VARIANTS:
        assert f"--variant {variant}" in result.stdout

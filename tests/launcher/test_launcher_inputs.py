"""The inputs the cluster tooling uses, and bad values of every one: one line naming the variable,
the value and what to do; exit 2; nothing started. Also the dry run's marker format, golden.

Set UPDATE_GOLDEN=1 to rewrite the golden dry-run files, then review the diff by eye.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from imagebuild.launcher import serve
from imagebuild.launcher.flags import MANAGED_FLAGS, managed_flag
from imagebuild.launcher.recipes import recipes_dir
from tests.launcher.launcher_support import GOLDEN_DIR, argv_section, k3_env


def plan_json(capsys: pytest.CaptureFixture[str], env: dict[str, str], *args: str) -> dict[str, Any]:
    code = serve.main(["--json", *args], env)
    out, err = capsys.readouterr()
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document


def flag(argv: list[str], name: str) -> str:
    return str(argv[argv.index(name) + 1])


BAD_VALUES = [
    ("CONTAINER_BARRIER_PORT", "0", "must be an integer in 1..65535"),
    ("CONTAINER_BARRIER_PORT", "70000", "must be an integer in 1..65535"),
    ("CONTAINER_BARRIER_PORT", "2223/tcp", "must be an integer in 1..65535"),
    ("BARRIER_TIMEOUT_S", "inf", "must be a finite number > 0"),
    ("BARRIER_TIMEOUT_S", "nan", "must be a finite number > 0"),
    ("BARRIER_TIMEOUT_S", "-5", "must be a finite number > 0"),
    ("JIT_LOCK_STALE_MIN", "0", "must be a finite number > 0"),
    ("JIT_LOCK_STALE_MIN", "1e999", "must be a finite number > 0"),
    ("LOG_WAIT_TIMEOUT_SECONDS", "inf", "must be a finite number > 0"),
    ("READY_TIMEOUT_S", "NaN", "must be a finite number > 0"),
    ("STOP_GRACE_S", "-inf", "must be a finite number > 0"),
    ("CPU_DISTRIBUTED_TIMEOUT_SECONDS", "1.5", "must be an integer >= 1"),
    ("CPU_DISTRIBUTED_TIMEOUT_SECONDS", "0", "must be an integer >= 1"),
    ("IPADDRS", "127.0.0.1,,127.0.0.2", "has an empty entry: give one address per node"),
    ("IPADDRS", "10.0.0.1,10.0.0.2;reboot", "is not a host name or IP address"),
    ("MASTER_ADDR", "10.0.0.1 --evil", "is not a host name or IP address"),
    ("SLURM_NNODES", "two", "must be an integer >= 1"),
    ("SLURM_JOB_NUM_NODES", "0", "must be an integer >= 1"),
    ("SLURM_NODEID", "-1", "must be an integer >= 0"),
    ("SLURM_JOB_NODELIST", "node[3-1]", "is not a SLURM hostlist"),
    ("SLURM_JOB_ID", "../../etc", "must be a plain name"),
    ("SLURM_JOB_ID", "a/b", "must be a plain name"),
    ("SLURM_JOB_ID", "..", "must be a plain name"),
    ("SLURM_JOB_ID", ".shutdown", "must be a plain name"),
    ("RECIPE", "../kimi-k3", "must be a plain name"),
    ("RECIPE", "/etc/passwd", "must be a plain name"),
    ("BENCHMARK_RESULTS", "../perf.csv", "must be a plain name"),
    ("LOG_ROOT", "run_logs", "must be an absolute path"),
    ("xP", "-1", "must be an integer >= 0"),
    ("yD", "one", "must be an integer >= 0"),
    ("PERF_TAGS", "colocated\nnoep", "contains a control character"),
    ("MODEL_NAME", "kimi\tk3", "contains a control character"),
    ("EXTRA_SERVE_ARGS", "-tp 4", "has -tp (--tensor-parallel-size), which the launcher sets itself"),
    (
        "EXTRA_SERVE_ARGS",
        "--tensor_parallel_size=4",
        "which the launcher sets itself: remove it and set TP_SIZE",
    ),
    ("EXTRA_SERVE_ARGS", "-tp8", "has -tp8 (--tensor-parallel-size)"),
    ("EXTRA_SERVE_ARGS", "--enforce-eager --no-enable-expert-parallel", "set ENABLE_EP instead"),
    ("EXTRA_SERVE_ARGS", "--max-num-seqs 4 -pp 1", "has -pp (--pipeline-parallel-size)"),
    (
        "COLOCATED_EXTRA_ARGS",
        "--port 9000",
        "has --port, which the launcher sets itself: remove it and set SERVE_PORT",
    ),
    ("COLOCATED_EXTRA_ARGS", '["-n", "4"]', "has -n (--nnodes)"),
    ("EXTRA_SERVE_ARGS", '["--hf-overrides", "{\\"a\\":\\n1}"]', "contains a control character, U+000A (newline)"),
    ("EXTRA_SERVE_ARGS", "--max-num-seqs 4 --x=\u202e", "contains a control character, U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    # Every value that becomes a vLLM flag's value, by its kind.
    ("KV_CACHE_MEMORY_BYTES", "abc", "must be an integer in 1..1099511627776"),
    ("KV_CACHE_MEMORY_BYTES", "0", "must be an integer in 1..1099511627776"),
    ("KV_CACHE_MEMORY_BYTES", "4e10", "must be an integer in 1..1099511627776"),
    ("KV_CACHE_MEMORY_BYTES", "400000000000000", "must be an integer in 1..1099511627776"),
    ("KV_BLOCK_SIZE", "-16", "is not one of 1, 8, 16, 32, 64, 128, 256"),
    ("KV_BLOCK_SIZE", "12", "is not one of 1, 8, 16, 32, 64, 128, 256"),
    ("KV_CACHE_DTYPE", "fp8 --x", "is not one of auto, float16, bfloat16"),
    ("KV_CACHE_DTYPE", "fp9", "Perhaps you meant fp8?"),
    ("GPU_MEMORY_UTILIZATION", "0.88 --x", "must be a number in (0, 1]"),
    ("DISTRIBUTED_TIMEOUT_SECONDS", "-1", "must be an integer >= 1"),
    ("ALL2ALL_BACKEND", "mori --x", "is not a backend name"),
    ("MODEL_NAME", "kimi\u202ek3", "contains a control character, U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    ("MODEL_NAME", "kimi\u2066k3", "contains a control character, U+2066 (LEFT-TO-RIGHT ISOLATE)"),
    ("MODEL_NAME", "--enforce-eager", "starts with '-', which vLLM would read as a flag"),
    ("MODEL_PATH", "/models/\u202eK3", "contains a control character, U+202E"),
    ("MODEL_PATH", "-models", "starts with '-', which vLLM would read as a flag"),
    ("PERF_TAGS", "a\x9bb", "contains a control character, U+009B"),
]


@pytest.mark.parametrize(
    ("name", "value", "message"), BAD_VALUES, ids=[f"{n}={v!r}" for n, v, _ in BAD_VALUES]
)
def test_a_bad_value_is_one_line_exit_2_and_nothing_started(
    node_env: dict[str, str], capsys: pytest.CaptureFixture[str], name: str, value: str, message: str
) -> None:
    env = {**node_env, name: value}
    if name == "READY_TIMEOUT_S":
        del env["LOG_WAIT_TIMEOUT_SECONDS"]  # its other name; giving both differently is its own error
    code = serve.main([], env)  # a real start, not a dry run
    _, err = capsys.readouterr()
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("serve: error: ")
    assert name in lines[0]
    assert value in lines[0] or repr(value) in lines[0]
    assert message in lines[0]
    assert not Path(env["STUB_VLLM_RECORD"]).exists()  # no vLLM
    with socket.create_server(("", int(node_env["CONTAINER_BARRIER_PORT"]))):  # no barrier listening
        pass


def test_a_long_value_is_refused_and_shown_cut_short(
    node_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve.main([], {**node_env, "MODEL_NAME": "k" * 5000}) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "MODEL_NAME='kkkk" in line
    assert "is 5000 characters long (at most 4096)" in line
    assert len(line) < 200
    assert not Path(node_env["STUB_VLLM_RECORD"]).exists()


def test_the_kv_cache_values_the_recipe_sets_reach_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    argv = plan_json(capsys, k3_env(KV_CACHE_DTYPE="fp8_e4m3", KV_BLOCK_SIZE="64"))["argv"]
    assert (flag(argv, "--kv-cache-dtype"), flag(argv, "--block-size")) == ("fp8_e4m3", "64")
    assert flag(argv, "--kv-cache-memory-bytes") == "40000000000"


def test_a_recipe_flag_that_is_a_path_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert serve.main(["--json", "--recipe", "../../tmp/evil"], k3_env()) == 2
    assert "RECIPE='../../tmp/evil' must be a plain name" in capsys.readouterr().err


def test_both_names_of_extra_args_must_agree(capsys: pytest.CaptureFixture[str]) -> None:
    env = k3_env(EXTRA_SERVE_ARGS="--max-num-seqs 4", COLOCATED_EXTRA_ARGS="--max-num-seqs 2")
    assert serve.main(["--json"], env) == 2
    assert (
        "EXTRA_SERVE_ARGS='--max-num-seqs 4' and COLOCATED_EXTRA_ARGS='--max-num-seqs 2' name the same input "
        "with different values: set only one of EXTRA_SERVE_ARGS, COLOCATED_EXTRA_ARGS"
    ) in capsys.readouterr().err
    same = k3_env(EXTRA_SERVE_ARGS="--max-num-seqs 4", COLOCATED_EXTRA_ARGS="--max-num-seqs 4")
    assert plan_json(capsys, same)["argv"][-2:] == ["--max-num-seqs", "4"]


def test_colocated_extra_args_is_the_references_name(capsys: pytest.CaptureFixture[str]) -> None:
    env = k3_env(COLOCATED_EXTRA_ARGS="--enforce-eager --max-num-seqs 4")
    assert plan_json(capsys, env)["argv"][-3:] == ["--enforce-eager", "--max-num-seqs", "4"]


def test_cpu_distributed_timeout_is_its_own_value(capsys: pytest.CaptureFixture[str]) -> None:
    argv = plan_json(capsys, k3_env(CPU_DISTRIBUTED_TIMEOUT_SECONDS="9000"))["argv"]
    assert (flag(argv, "--distributed-timeout-seconds"), flag(argv, "--cpu-distributed-timeout-seconds")) == (
        "7200",
        "9000",
    )


def test_the_benchmark_gets_what_the_references_scripts_read(capsys: pytest.CaptureFixture[str]) -> None:
    document = plan_json(capsys, k3_env(VARIANT="pp2xtp8", SERVE_PORT="8100"))
    assert document["benchmark_env"] == {
        "BENCHMARK_PORT": "8100",
        "xP": "1",
        "yD": "0",
        "PERF_DEPLOYMENT_TYPE": "colocated",
        "PERF_TAGS": "vllm_multinode,colocated,pp2xtp8,noep",
    }
    given = plan_json(
        capsys, k3_env(xP="2", PERF_DEPLOYMENT_TYPE="colocated_nightly", PERF_TAGS="k3,nightly")
    )
    assert given["benchmark_env"]["xP"] == "2"
    assert given["benchmark_env"]["PERF_DEPLOYMENT_TYPE"] == "colocated_nightly"
    assert given["benchmark_env"]["PERF_TAGS"] == "k3,nightly"


def test_benchmark_results_default_to_perf_csv_in_the_log_dir(capsys: pytest.CaptureFixture[str]) -> None:
    document = plan_json(capsys, k3_env(BENCHMARK_CMD="bash /bench.sh"))
    assert document["benchmark_results"] == "/run_logs/12345/perf.csv"
    assert (
        plan_json(capsys, k3_env(BENCHMARK_CMD="bash /bench.sh", BENCHMARK_RESULTS="none"))[
            "benchmark_results"
        ]
        is None
    )
    assert plan_json(capsys, k3_env())["benchmark_results"] is None  # no benchmark, nothing expected


@pytest.mark.parametrize(
    "word",
    ["--tensor-parallel-size", "-tp", "-tp=8", "-tp8", "--tensor_parallel_size", "--pipeline-parallel-size=2",
     "-pp", "-n", "-r", "-ep", "--no-enable-expert-parallel", "--node_rank=1", "--headless", "--port=1"],
)  # fmt: skip
def test_every_spelling_of_an_owned_flag_is_recognised(word: str) -> None:
    assert managed_flag(word) in MANAGED_FLAGS


@pytest.mark.parametrize(
    "word",
    ["--max-num-seqs", "-O3", "-q", "--portal", "-dp", "--data-parallel-size", "4", "-1", "--enforce-eager"],
)
def test_flags_the_launcher_does_not_own_pass(word: str) -> None:
    assert managed_flag(word) is None


@pytest.mark.parametrize("role", ["head", "worker"])
def test_dry_run_marker_format_matches_golden(capsys: pytest.CaptureFixture[str], role: str) -> None:
    env = k3_env(
        VARIANT="moriep",
        NODE_RANK="0" if role == "head" else "1",
        IPADDRS="10.0.0.1,10.0.0.2",
        HOME="/root",
        AITER_JIT_DIR="/opt/vllm_cache/aiter_jit",
        BENCHMARK_CMD="bash /mad_scripts/vllm_dissag/benchmark_xPyD.sh",
    )
    assert serve.main(["--dry-run"], env) == 0
    text = capsys.readouterr().out.replace(str(recipes_dir({})), "<recipes>")
    golden = GOLDEN_DIR / f"kimi-k3-moriep-{role}.dryrun"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text()
    # What the reference's tooling reads, `awk '/^===DRYRUN/{f=1;next} /^===END===/{f=0} f'`, is the argv.
    assert argv_section(text) == (GOLDEN_DIR / f"kimi-k3-moriep-{role}.argv").read_text().splitlines()

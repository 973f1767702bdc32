"""The launcher serving for real, with a stand-in vllm first on PATH: readiness, failure, teardown.

Each test runs the launcher as a subprocess (it installs signal handlers and starts process
groups) with timeouts of a few seconds, and checks that nothing it started is left running.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.launcher import serve
from imagebuild.launcher.plan import resolve_plan
from tests.launcher.launcher_support import BarrierPeer, alive, log_dir, stub_record, wait_for

Launch = Callable[..., subprocess.Popen[str]]
Peer = Callable[[dict[str, str], int], BarrierPeer]


def finish(proc: subprocess.Popen[str], timeout: float = 15) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def assert_all_stopped(env: dict[str, str]) -> None:
    pids = stub_record(env)["pids"]
    wait_for(lambda: not any(alive(pid) for pid in pids), 2, f"stand-in vllm processes {pids} to end")


def test_head_serves_runs_the_benchmark_and_tears_down(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    seen = Path(node_env["HOME"]) / "benchmark.json"
    names = (
        "SERVED_MODEL_NAME",
        "NIAH_MODEL",
        "BENCHMARK_PORT",
        "xP",
        "yD",
        "PERF_DEPLOYMENT_TYPE",
        "PERF_TAGS",
    )
    # Like the reference's benchmarks: read the exports, write perf.csv in the job's log directory.
    check = (f"import json, os; json.dump({{k: os.environ[k] for k in {names!r}}}, open({str(seen)!r}, 'w')); "
             f"open({str(log_dir(node_env) / 'perf.csv')!r}, 'w').write('model,throughput\\n')")  # fmt: skip
    env = {
        **node_env,
        "VARIANT": "moriep",
        "GPU_MEMORY_UTILIZATION": "0.5",
        "BENCHMARK_CMD": json.dumps([sys.executable, "-c", check]),
    }
    stale_lock = Path(env["AITER_JIT_DIR"]) / "build" / "lock_module_moe_asm"
    stale_lock.parent.mkdir(parents=True)
    stale_lock.touch()
    os.utime(stale_lock, (time.time() - 3600 * 2, time.time() - 3600 * 2))
    worker = barrier_peer(env, 1)
    code, out, err = finish(launched(env))
    assert code == 0, err
    assert worker.outcome is True
    assert not stale_lock.exists()
    assert f"removed a stale AITER JIT lock {stale_lock} (120 min old" in err
    assert json.loads(seen.read_text()) == {
        "SERVED_MODEL_NAME": "kimi-k3",
        "NIAH_MODEL": "kimi-k3",
        "BENCHMARK_PORT": env["SERVE_PORT"],
        "xP": "1",
        "yD": "0",
        "PERF_DEPLOYMENT_TYPE": "colocated",
        "PERF_TAGS": "vllm_multinode,colocated,pp2xtp8,ep_mori_low_latency",
    }
    assert f"benchmark results: {log_dir(env) / 'perf.csv'}" in err
    assert "SERVED_MODEL_NAME=kimi-k3 NIAH_MODEL=kimi-k3" in err
    assert (log_dir(env) / ".shutdown").exists()
    assert_all_stopped(env)

    record = stub_record(env)
    assert tuple(record["argv"][1:]) == resolve_plan(env).argv[1:]
    assert record["env"]["GPU_MEMORY_UTILIZATION"] == "0.5"  # submit time wins
    assert record["env"]["VLLM_ROCM_USE_AITER_MLA"] == "0"  # recipe env applied
    assert record["env"]["NIAH_MODEL"] == "kimi-k3"
    # vLLM's output reaches both the console and the per-node log.
    assert "Application startup complete" in out
    assert "Application startup complete" in (log_dir(env) / "colocated_bench_NODE0.log").read_text()


def test_head_is_ready_on_health_probe_without_the_log_line(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    env = {
        **node_env,
        "STUB_VLLM_MODE": "health",
        "BENCHMARK_CMD": f"{sys.executable} -c pass",
        "BENCHMARK_RESULTS": "none",
    }
    barrier_peer(env, 1)
    code, _, err = finish(launched(env))
    assert code == 0, err
    assert "vLLM is ready" in err
    assert_all_stopped(env)


def test_vllm_dying_early_fails_the_head_with_the_log_tail(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    env = {**node_env, "STUB_VLLM_MODE": "die"}
    barrier_peer(env, 1)
    started = time.monotonic()
    code, _, err = finish(launched(env))
    assert time.monotonic() - started < 5
    assert code == 1
    assert "serve: error: vLLM exited with code 3 before it was ready" in err
    assert "RuntimeError: stub engine core failed to start" in err.split("--- last 40 lines")[1]
    assert "loading shard 59" in err
    assert "loading shard 10\n" not in err  # a tail, not the whole log
    assert (log_dir(env) / ".shutdown").exists()


def test_readiness_timeout_fails_the_head_and_stops_vllm(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    env = {**node_env, "STUB_VLLM_MODE": "hang", "LOG_WAIT_TIMEOUT_SECONDS": "1"}
    barrier_peer(env, 1)
    code, _, err = finish(launched(env))
    assert code == 1
    assert "vLLM was not ready after 1 s: read the log or raise LOG_WAIT_TIMEOUT_SECONDS" in err
    assert (log_dir(env) / ".shutdown").exists()
    assert_all_stopped(env)


def test_sigterm_on_the_head_raises_the_sentinel_and_stops_vllm(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    env = {**node_env, "STUB_VLLM_MODE": "hang", "LOG_WAIT_TIMEOUT_SECONDS": "60"}
    barrier_peer(env, 1)
    proc = launched(env)
    wait_for(Path(env["STUB_VLLM_RECORD"]).exists, 5, "the stand-in vllm to start")
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc, timeout=10)
    assert code == 128 + signal.SIGTERM
    assert "received SIGTERM" in err
    assert (log_dir(env) / ".shutdown").exists()
    assert_all_stopped(env)


def test_signals_during_teardown_and_exit_do_not_cut_it_short(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    """SLURM signals every process of the step and a runtime's trap may pass one more on: SIGTERM
    over and over, from the first until the launcher has exited, still ends it by its own exit,
    143, after its teardown (a late one once killed it with the default action, its status lost)."""
    env = {**node_env, "STUB_VLLM_MODE": "stubborn", "STOP_GRACE_S": "0.5", "LOG_WAIT_TIMEOUT_SECONDS": "60"}
    barrier_peer(env, 1)
    proc = launched(env)
    wait_for(Path(env["STUB_VLLM_RECORD"]).exists, 5, "the stand-in vllm to start")
    while proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.005)
    code, _, err = finish(proc, timeout=10)
    assert code == 128 + signal.SIGTERM, err
    assert "ignored SIGTERM for 0.5 s: SIGKILL" in err
    assert (log_dir(env) / ".shutdown").exists()
    assert_all_stopped(env)


def test_failing_benchmark_fails_the_head(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    env = {**node_env, "BENCHMARK_CMD": f"{sys.executable} -c 'raise SystemExit(7)'"}
    barrier_peer(env, 1)
    code, _, err = finish(launched(env))
    assert code == 1
    assert "BENCHMARK_CMD exited with code 7" in err
    assert (log_dir(env) / ".shutdown").exists()
    assert_all_stopped(env)


def test_stale_sentinel_is_cleared_when_the_head_starts(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    sentinel = log_dir(node_env) / ".shutdown"
    sentinel.parent.mkdir(parents=True)
    sentinel.write_text("from an earlier run\n")
    env = {**node_env, "BENCHMARK_CMD": f"{sys.executable} -c pass", "BENCHMARK_RESULTS": "none"}
    barrier_peer(env, 1)
    code, _, err = finish(launched(env))
    assert code == 0, err
    assert "raised by the head" in sentinel.read_text()


def test_worker_stops_vllm_when_the_sentinel_appears(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    env = {**node_env, "NODE_RANK": "1"}
    head = barrier_peer(env, 0)
    proc = launched(env)
    wait_for(Path(env["STUB_VLLM_RECORD"]).exists, 5, "the stand-in vllm to start")
    assert "--headless" in stub_record(env)["argv"]
    assert head.outcome is True
    (log_dir(env) / ".shutdown").write_text("raised by the test\n")
    raised = time.monotonic()
    code, _, err = finish(proc, timeout=10)
    assert time.monotonic() - raised < 4
    assert code == 0, err
    assert "the head raised" in err
    assert_all_stopped(env)


def test_worker_kills_a_vllm_that_ignores_sigterm(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    env = {**node_env, "NODE_RANK": "1", "STUB_VLLM_MODE": "stubborn", "STOP_GRACE_S": "0.5"}
    barrier_peer(env, 0)
    proc = launched(env)
    wait_for(Path(env["STUB_VLLM_RECORD"]).exists, 5, "the stand-in vllm to start")
    (log_dir(env) / ".shutdown").touch()
    code, _, err = finish(proc, timeout=10)
    assert code == 0, err
    assert "ignored SIGTERM for 0.5 s: SIGKILL" in err
    assert_all_stopped(env)


def test_worker_does_not_start_vllm_after_the_head_is_gone(
    node_env: dict[str, str], launched: Launch
) -> None:
    env = {**node_env, "NODE_RANK": "1"}
    log_dir(env).mkdir(parents=True)
    (log_dir(env) / ".shutdown").touch()
    code, _, err = finish(launched(env))
    assert code == 0, err
    assert not Path(env["STUB_VLLM_RECORD"]).exists()


def test_worker_does_not_raise_the_sentinel(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    env = {**node_env, "NODE_RANK": "1", "STUB_VLLM_MODE": "die"}
    barrier_peer(env, 0)
    code, _, err = finish(launched(env))
    assert code == 1
    assert "vLLM exited with code 3" in err
    assert not (log_dir(env) / ".shutdown").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"NNODES": "1"}, "topology mismatch"),
        ({"PATH": "/usr/bin:/bin"}, "vllm: vllm is not on PATH"),
        (
            {"MODEL_PATH": "/nonexistent/Kimi-K3"},
            "MODEL_PATH=/nonexistent/Kimi-K3 does not exist on this node",
        ),
    ],
)
def test_head_that_cannot_start_still_raises_the_sentinel(
    node_env: dict[str, str], capsys: pytest.CaptureFixture[str], overrides: dict[str, str], message: str
) -> None:
    env = {**node_env, **overrides}
    assert serve.main([], env) == 2
    assert message in capsys.readouterr().err
    assert (log_dir(env) / ".shutdown").exists()


def test_two_nodes_meet_serve_and_stop_together(
    node_env: dict[str, str], launched: Launch, tmp_path: Path
) -> None:
    results = log_dir(node_env) / "perf.csv"
    worker_record = tmp_path / "worker-stub.json"
    # A real head is ready only once the workers' vLLM joined; the stand-in is ready at once, so the
    # benchmark waits for the worker's stand-in before it writes its results.
    bench = (f"import pathlib, time; w = pathlib.Path({str(worker_record)!r}); "
             "[time.sleep(0.05) for _ in range(200) if not w.exists()]; "
             f"open({str(results)!r}, 'w').write('x\\n')")  # fmt: skip
    head_env = {
        **node_env,
        "IPADDRS": "127.0.0.1,127.0.0.2",
        "BENCHMARK_CMD": json.dumps([sys.executable, "-c", bench]),
    }
    worker_env = {**head_env, "NODE_RANK": "1", "STUB_VLLM_RECORD": str(worker_record)}
    worker = launched(worker_env)  # the worker's container may well come up first
    head = launched(head_env)
    code, _, head_err = finish(head, timeout=30)
    assert code == 0, head_err
    code, _, worker_err = finish(worker, timeout=30)
    assert code == 0, worker_err
    assert "container barrier: node 1 (127.0.0.2) arrived (2 of 2)" in head_err
    assert "container barrier: all 2 nodes arrived" in worker_err
    assert "the head raised" in worker_err
    assert "--headless" in stub_record(worker_env)["argv"]
    assert (log_dir(node_env) / "colocated_bench_NODE0.log").exists()
    assert (log_dir(node_env) / "colocated_bench_NODE1.log").exists()
    assert_all_stopped(head_env)
    assert_all_stopped(worker_env)


def test_a_node_that_never_arrives_ends_every_node_before_vllm_starts(
    node_env: dict[str, str], launched: Launch, tmp_path: Path
) -> None:
    three_nodes = {
        **node_env,
        "NNODES": "3",
        "PP_SIZE": "3",
        "IPADDRS": "127.0.0.1,127.0.0.2,127.0.0.3",
        "BARRIER_TIMEOUT_S": "2",
    }
    head = launched(three_nodes)
    worker = launched(
        {**three_nodes, "NODE_RANK": "1", "STUB_VLLM_RECORD": str(tmp_path / "worker-stub.json")}
    )
    for proc in (head, worker):
        code, _, err = finish(proc, timeout=30)
        assert code == 1, err
        errors = [line for line in err.splitlines() if line.startswith("serve: error:")]
        assert errors == [
            "serve: error: container barrier: node 2 (127.0.0.3) never arrived within 2 s: "
            "read that node's container log, or raise BARRIER_TIMEOUT_S"
        ]
    assert not Path(three_nodes["STUB_VLLM_RECORD"]).exists()
    assert not (tmp_path / "worker-stub.json").exists()
    assert (log_dir(three_nodes) / ".shutdown").exists()


def test_a_benchmark_that_writes_no_results_fails_the_run(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    env = {**node_env, "BENCHMARK_CMD": f"{sys.executable} -c pass"}
    barrier_peer(env, 1)
    code, _, err = finish(launched(env))
    assert code == 1
    results = log_dir(env) / "perf.csv"
    assert (
        f"serve: error: BENCHMARK_CMD exited 0 but wrote no {results}: see its output above, "
        "or set BENCHMARK_RESULTS=none if it writes no results file"
    ) in err
    assert (log_dir(env) / ".shutdown").exists()
    assert_all_stopped(env)


def test_an_earlier_runs_results_do_not_count(
    node_env: dict[str, str], launched: Launch, barrier_peer: Peer
) -> None:
    results = log_dir(node_env) / "perf.csv"
    results.parent.mkdir(parents=True)
    results.write_text("from an earlier run\n")
    env = {**node_env, "BENCHMARK_CMD": f"{sys.executable} -c pass"}
    barrier_peer(env, 1)
    code, _, err = finish(launched(env))
    assert code == 1
    assert f"BENCHMARK_CMD exited 0 but wrote no {results}" in err


def test_sigterm_at_the_barrier_frees_the_port_and_raises_the_sentinel(
    node_env: dict[str, str], launched: Launch
) -> None:
    env = {**node_env, "BARRIER_TIMEOUT_S": "60"}
    proc = launched(env)
    wait_for(lambda: _listening(env), 5, "the head to listen at the barrier")
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc, timeout=10)
    assert code == 128 + signal.SIGTERM
    assert "received SIGTERM" in err
    assert (log_dir(env) / ".shutdown").exists()
    assert not Path(env["STUB_VLLM_RECORD"]).exists()
    assert not _listening(env)


def _listening(env: dict[str, str]) -> bool:
    try:
        socket.create_connection(("127.0.0.1", int(env["CONTAINER_BARRIER_PORT"])), timeout=1).close()
    except OSError:
        return False
    return True

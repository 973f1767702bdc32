"""Running one node of the plan: clean stale JIT locks, meet the other nodes at the barrier, then
serve. The head waits for readiness, runs the benchmark and raises the shutdown sentinel however it
exits; a worker serves headless until the sentinel appears."""

from __future__ import annotations

import http.client
import os
import shlex
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from .barrier import wait_at_barrier
from .jit_locks import remove_stale_locks
from .messages import EXIT_FAILED, LauncherError, say
from .plan import Plan
from .process import TAIL_LINES, Child, held_signals, ignore_signals, require_executable, stop_all
from .sentinel import clear_stale_sentinel, raise_sentinel

READY_MARKER = "Application startup complete"
POLL_S = 0.25


def probe_health(port: int) -> bool:
    """GET /health on the loopback, bypassing any *_proxy variables, which would send it off the node."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/health", timeout=1.0) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):
        return False


def _vllm_failed(server: Child, plan: Plan, what: str) -> LauncherError:
    # Stop first: vLLM's workers hold the pipe open, and the tail is complete only once they are gone.
    stop_all([server], plan.stop_grace_s)
    return LauncherError(
        f"vLLM {what}; full log: {plan.log_file}",
        exit_code=EXIT_FAILED,
        detail=f"--- last {TAIL_LINES} lines of vLLM output ---\n{server.tail()}",
    )


def wait_until_ready(server: Child, plan: Plan) -> None:
    deadline = time.monotonic() + plan.ready_timeout_s
    while not (server.marker_seen.is_set() or probe_health(plan.inputs.serve_port)):
        code = server.poll()
        if code is not None:
            raise _vllm_failed(server, plan, f"exited with code {code} before it was ready")
        if time.monotonic() >= deadline:
            what = f"was not ready after {plan.ready_timeout_s:g} s: read the log or raise LOG_WAIT_TIMEOUT_SECONDS"
            raise _vllm_failed(server, plan, what)
        server.marker_seen.wait(POLL_S)


def _file_state(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


def _check_results(plan: Plan, before: tuple[int, int, int] | None) -> None:
    """A benchmark that exits 0 without results is a failed run, not a quiet success. The file must be
    new or changed since the benchmark started (a log directory may hold an earlier run's), and not empty."""
    if plan.results_file is None:
        return
    after = _file_state(plan.results_file)
    if after is None or after == before or after[2] == 0:
        what = "wrote no" if after is None or after == before else "left an empty"
        msg = (f"BENCHMARK_CMD exited 0 but {what} {plan.results_file}: see its output above, "
               "or set BENCHMARK_RESULTS=none if it writes no results file")  # fmt: skip
        raise LauncherError(msg, exit_code=EXIT_FAILED)
    say(f"benchmark results: {plan.results_file}")


def _teardown(plan: Plan, children: Sequence[Child]) -> None:
    ignore_signals()
    if plan.inputs.is_head:
        raise_sentinel(plan.sentinel)  # first, so the workers stop while this node does
    stop_all(children, plan.stop_grace_s)


def run_head(plan: Plan, env: Mapping[str, str]) -> int:
    clear_stale_sentinel(plan.sentinel)
    children: list[Child] = []
    try:
        if plan.barrier is not None:
            wait_at_barrier(plan.barrier)
        with held_signals():  # a signal now waits until teardown knows the child
            server = Child.start(plan.argv, env, what="vllm", tee_to=plan.log_file, marker=READY_MARKER)
            children.append(server)
        wait_until_ready(server, plan)
        name = plan.inputs.served_name
        say(f"vLLM is ready on port {plan.inputs.serve_port}: SERVED_MODEL_NAME={name} NIAH_MODEL={name}")
        if not plan.benchmark:
            vllm_code = server.proc.wait()
            if vllm_code != 0:
                raise _vllm_failed(server, plan, f"exited with code {vllm_code}")
            return 0
        results_before = _file_state(plan.results_file) if plan.results_file else None
        with held_signals():
            benchmark = Child.start(plan.benchmark, {**env, **plan.benchmark_env}, what="BENCHMARK_CMD")
            children.insert(0, benchmark)
        while (code := benchmark.poll()) is None:
            died = server.poll()
            if died is not None:
                raise _vllm_failed(server, plan, f"exited with code {died} while the benchmark ran")
            time.sleep(POLL_S)
        if code != 0:
            msg = f"BENCHMARK_CMD exited with code {code}: see its output above"
            raise LauncherError(msg, exit_code=EXIT_FAILED)
        _check_results(plan, results_before)
        say("benchmark finished: stopping vLLM")
        return 0
    finally:
        _teardown(plan, children)


def run_worker(plan: Plan, env: Mapping[str, str]) -> int:
    def head_gone() -> bool:
        return plan.sentinel.exists()

    if head_gone() or (plan.barrier is not None and not wait_at_barrier(plan.barrier, stopped=head_gone)):
        say(f"the head already raised {plan.sentinel}: not starting vLLM")
        return 0
    children: list[Child] = []
    try:
        with held_signals():
            server = Child.start(plan.argv, env, what="vllm", tee_to=plan.log_file)
            children.append(server)
        while not head_gone():
            code = server.poll()
            if code == 0:
                return 0
            if code is not None:
                raise _vllm_failed(server, plan, f"exited with code {code}")
            time.sleep(POLL_S)
        say(f"the head raised {plan.sentinel}: stopping vLLM")
        return 0
    finally:
        _teardown(plan, children)


def run_node(plan: Plan, environ: Mapping[str, str]) -> int:
    model = plan.inputs.model_path
    if model.startswith("/") and not Path(model).exists():
        msg = f"MODEL_PATH={model} does not exist on this node: mount the model there or fix MODEL_PATH"
        raise LauncherError(msg)
    try:
        plan.log_dir.mkdir(parents=True, exist_ok=True)
        with plan.log_file.open("a") as log:
            log.write(
                f"# {time.strftime('%Y-%m-%dT%H:%M:%S%z')} serve.py pid {os.getpid()}: {shlex.join(plan.argv)}\n"
            )
    except OSError as error:
        msg = f"cannot write the log {plan.log_file} ({error}): set LOG_ROOT to a writable shared directory"
        raise LauncherError(msg) from error
    env = {**environ, **plan.env}
    # Before the barrier: a node that cannot start vLLM must not make the others wait for it.
    require_executable(plan.argv[0], env, what="vllm")
    if plan.inputs.is_head and plan.benchmark:
        require_executable(plan.benchmark[0], env, what="BENCHMARK_CMD")
    remove_stale_locks(plan.jit_lock_dirs, stale_min=plan.jit_lock_stale_min)
    return run_head(plan, env) if plan.inputs.is_head else run_worker(plan, env)

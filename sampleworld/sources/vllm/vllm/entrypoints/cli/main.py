# mypy: ignore-errors
# (A stand-in for code that runs in the sample base image's python, not part of the typed package.)
"""`vllm serve` of the sample vLLM fork: the start-up contract of the real one, without a model or GPU.

Head (no --headless): with --nnodes > 1 it first waits for every worker to join on --master-port (as the
real head's rendezvous does, bounded by --distributed-timeout-seconds), then serves GET /health and
GET /v1/models on --port and prints vLLM's readiness line "Application startup complete.".
Worker (--headless): joins the head at --master-addr:--master-port and runs until signalled.
Like the real CLI it refuses flags it does not know, a --quantization-config that is not JSON, and a
model directory without config.json. SIGTERM or SIGINT ends it with exit 0.

Fault knob, for the cluster fault tests: SAMPLE_VLLM_CRASH_AFTER_S=N makes a --headless worker print
a RuntimeError line and exit 1 N seconds after it joined (the head ignores it).
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from vllm import __version__

READY_LINE = "INFO:     Application startup complete."
CRASH_KNOB = "SAMPLE_VLLM_CRASH_AFTER_S"
RETRY_S = 0.5


def log(message):
    print(f"INFO {time.strftime('%m-%d %H:%M:%S')} {message}", flush=True)


def fail(message):
    print(message, flush=True)
    sys.exit(1)


def parse(argv):
    parser = argparse.ArgumentParser(prog="vllm")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("model")
    for flag in (
        "--served-model-name", "--distributed-executor-backend", "--master-addr", "--gpu-memory-utilization",
        "--kv-cache-dtype", "--all2all-backend", "--reasoning-parser", "--mm-encoder-tp-mode",
        "--safetensors-load-strategy", "--quantization-config", "--host",
    ):
        serve.add_argument(flag)
    for flag in (
        "--tensor-parallel-size", "--pipeline-parallel-size", "--nnodes", "--node-rank", "--master-port",
        "--distributed-timeout-seconds", "--cpu-distributed-timeout-seconds", "--block-size",
        "--kv-cache-memory-bytes", "--port", "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens",
    ):
        serve.add_argument(flag, type=int)
    for flag in ("--trust-remote-code", "--enable-expert-parallel", "--headless"):
        serve.add_argument(flag, action="store_true")
    args = parser.parse_args(argv)
    if args.quantization_config is not None:
        try:
            json.loads(args.quantization_config)
        except ValueError as error:
            parser.error(f"argument --quantization-config: invalid loads value: {args.quantization_config!r} ({error})")
    if args.headless and args.port is not None:
        parser.error("--headless workers serve no API: drop --port")
    return args


def wait_for_workers(args, timeout):
    """The head's rendezvous: every worker rank connects and says which it is."""
    expected = set(range(1, args.nnodes))
    server = socket.create_server(("", args.master_port), reuse_port=False)
    server.settimeout(RETRY_S)
    deadline = time.monotonic() + timeout
    joined = []
    while expected - set(joined):
        if time.monotonic() > deadline:
            fail(f"RuntimeError: timed out after {timeout}s waiting for ranks {sorted(expected - set(joined))} "
                 f"on port {args.master_port}")
        try:
            conn, peer = server.accept()
        except socket.timeout:
            continue
        with conn:
            conn.settimeout(5)
            words = conn.recv(64).decode(errors="replace").split()
        if len(words) == 2 and words[0] == "rank" and words[1].isdigit():
            joined.append(int(words[1]))
            log(f"rank {words[1]} joined from {peer[0]}")
    server.close()


def join_head(args, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((args.master_addr, args.master_port), timeout=5) as conn:
                conn.sendall(f"rank {args.node_rank}\n".encode())
            return
        except OSError as error:
            if time.monotonic() > deadline:
                fail(f"RuntimeError: rank {args.node_rank} could not reach the head at "
                     f"{args.master_addr}:{args.master_port} within {timeout}s ({error})")
            time.sleep(RETRY_S)


def api_handler(served_name):
    class Api(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health":
                self.reply(200, b"")
            elif self.path == "/v1/models":
                body = {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "vllm"}]}
                self.reply(200, json.dumps(body).encode(), "application/json")
            else:
                self.reply(404, b'{"detail":"Not Found"}', "application/json")

        def reply(self, status, body, content_type="text/plain"):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            log(f"{self.address_string()} - {fmt % args}")

    return Api


def serve(args):
    if not (Path(args.model) / "config.json").is_file():
        fail(f"ValueError: {args.model} has no config.json: not a model directory")
    rank = args.node_rank or 0
    nnodes = args.nnodes or 1
    timeout = args.distributed_timeout_seconds or 600
    log(f"vLLM API server version {__version__} (sample stand-in), rank {rank} of {nnodes}")
    if args.headless:
        join_head(args, timeout)
        log(f"rank {rank} joined the head at {args.master_addr}:{args.master_port}; waiting for work")
        crash = os.environ.get(CRASH_KNOB, "").strip()
        if crash:
            time.sleep(float(crash))
            fail(f"RuntimeError: sample vLLM worker rank {rank} crashed ({CRASH_KNOB}={crash})")
        while True:
            time.sleep(3600)
    if nnodes > 1:
        wait_for_workers(args, timeout)
    name = args.served_model_name or args.model
    port = args.port or 8000
    httpd = ThreadingHTTPServer(("", port), api_handler(name))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    log(f"Starting vLLM API server on http://0.0.0.0:{port}, model {name}")
    print(READY_LINE, flush=True)
    while True:
        time.sleep(3600)


def main(argv=None):
    def stop(signum, _frame):
        log(f"received {signal.Signals(signum).name}: shutting down")
        sys.exit(0)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    args = parse(sys.argv[1:] if argv is None else argv)
    serve(args)


if __name__ == "__main__":
    main()

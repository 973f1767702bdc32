"""The `imagebuild slurm` subcommand: arguments in, a checked Job, the script out (stdout or -o FILE).

With --json stdout is one document: the job's shape, and the script itself unless -o wrote it to a file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from imagebuild import __version__
from imagebuild.cli import arguments
from imagebuild.cli.output import write_json, write_text
from imagebuild.cli.verbs import Verb, Verbs
from imagebuild.launcher.inputs import SPECS
from imagebuild.log import logger
from imagebuild.slurm import job as jobs
from imagebuild.slurm.arch_recipes import arch_recipes_dir
from imagebuild.slurm.archive import read_archive
from imagebuild.slurm.from_record import RecordedImage, read_record, recorded_recipe
from imagebuild.slurm.recipe import check_topology
from imagebuild.slurm.runtimes import DEFAULT_RUNTIME, RUNTIME_NAMES
from imagebuild.slurm.script import render_script
from imagebuild.util.files import atomic_file

DESCRIPTION = (
    "write an sbatch script that gets the image onto every node (pull by digest, or import a verified "
    "archive) and starts the image's launcher there"
)
NOTES = """\
Options whose value starts with '-' take it after '=': --docker-arg=--privileged, --sbatch-arg=--exclusive.
Nothing is written unless every value is valid and the node count fits the recipe (exit 2 otherwise)."""


def register(verbs: Verbs) -> None:
    p = verbs.add(
        Verb(
            name="slurm",
            summary=DESCRIPTION,
            run=run,
            examples=(
                "imagebuild slurm --nodes 2 --variant pp2xtp8 --model-path /shared/models/kimi-k3 "
                "--image registry.example.com/ml/kimi-k3@sha256:<64 hex> --time 04:00:00 -o kimi-k3.sbatch",
                "imagebuild slurm --nodes 2 --variant pp2xtp8 --model-path /shared/models/kimi-k3 "
                "--archive /shared/images/kimi-k3-06203f705c54.tar.zst.json > kimi-k3.sbatch",
                "imagebuild slurm --nodes 2 --variant pp2xtp8 --model-path /shared/models/kimi-k3 "
                "--image registry.example.com/ml/kimi-k3@sha256:<64 hex> -o kimi-k3.sbatch --json",
                "imagebuild slurm --nodes 2 --variant pp2xtp8 --model-path /shared/models/kimi-k3 "
                "--from-record -o kimi-k3.sbatch",
            ),
            checkout=False,
            json="the job (nodes, recipe, variant, image) and where the script went (or the script)",
            notes=NOTES,
        )
    )
    p.add_argument("--nodes", type=int, required=True, help="nodes of the job; must fit the recipe's TP x PP")
    p.add_argument(
        "--recipe",
        help=f"launcher recipe (default: the one the --from-record image carries, else {SPECS['RECIPE'].default})",
    )
    p.add_argument("--variant", required=True, help="variant of the recipe, e.g. pp2xtp8")
    p.add_argument(
        "--arch",
        dest="recipe_arch",
        metavar="ARCH",
        help="arch profile the image was built for: its recipes are the launcher's as stages/arch/ARCH.toml "
        "changes them (default: the --from-record record's arch, else the launcher's own recipes)",
    )
    p.add_argument(
        "--model-path", required=True, help="model directory, the same absolute path on every node"
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--image", metavar="REF@sha256:...", help="pull this reference on every node")
    source.add_argument(
        "--archive",
        type=arguments.input_file,
        metavar="MANIFEST",
        help="import this archive (manifest on shared storage)",
    )
    source.add_argument(
        "--from-record",
        nargs="?",
        type=arguments.input_file,
        const=Path(),  # the working directory's project: its build/gfx942.build.json
        metavar="RECORD",
        help="the image publish or export noted in this build record (or a project directory's; default: "
        "the project's build/gfx942.build.json), and the recipe it carries",
    )
    p.add_argument(
        "--runtime",
        default=DEFAULT_RUNTIME,
        help=f"what runs the container on the nodes: {', '.join(RUNTIME_NAMES)} (default %(default)s); "
        "pyxis and charliecloud run a squashfs --archive",
    )
    p.add_argument("--job-name", help="SLURM job name (default RECIPE-VARIANT)")
    p.add_argument("--partition", help="SLURM partition")
    p.add_argument("--time", default=jobs.DEFAULT_TIME, help=f"wall time (default {jobs.DEFAULT_TIME})")
    p.add_argument(
        "--log-dir",
        type=Path,
        help="shared directory for logs and the sentinel (default SUBMITDIR/imagebuild-logs)",
    )
    p.add_argument("--benchmark-cmd", default="", help="run on the head once vLLM is ready")
    p.add_argument(
        "--no-devices",
        action="store_true",
        help="leave /dev/kfd, /dev/dri, /dev/infiniband and the video group out (machines without GPUs)",
    )
    p.add_argument(
        "--serve-port",
        type=int,
        default=jobs.DEFAULT_SERVE_PORT,
        help="vLLM's API port on the head (default %(default)s)",
    )
    p.add_argument(
        "--master-port",
        type=int,
        default=jobs.DEFAULT_MASTER_PORT,
        help="vLLM's rendezvous port (default %(default)s)",
    )
    p.add_argument(
        "--barrier-port",
        type=int,
        default=jobs.DEFAULT_BARRIER_PORT,
        help="the launcher's container barrier (default %(default)s)",
    )
    p.add_argument(
        "--barrier-timeout",
        type=int,
        default=jobs.DEFAULT_BARRIER_TIMEOUT_S,
        help="seconds the barrier waits for every node (default %(default)s)",
    )
    p.add_argument(
        "--stop-timeout",
        type=int,
        default=jobs.DEFAULT_STOP_TIMEOUT_S,
        help="seconds `docker stop` gives the launcher (default %(default)s)",
    )
    p.add_argument(
        "--shm-size",
        default=jobs.DEFAULT_SHM_SIZE,
        help="the container's /dev/shm without --ipc host (default %(default)s)",
    )
    p.add_argument(
        "--ulimit", action="append", default=[], metavar="NAME=SOFT[:HARD]", help="replace a default ulimit"
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment for the launcher and vLLM",
    )
    p.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="copy from the job's environment (secrets)",
    )
    p.add_argument(
        "--docker-arg", action="append", default=[], metavar="ARG", help="one more docker run argument"
    )
    p.add_argument(
        "--rdma-lib", action="append", default=[], metavar="PATH", help="one more host RDMA library"
    )
    p.add_argument(
        "--no-default-rdma-libs",
        action="store_true",
        help="mount only the --rdma-lib paths, not the default list",
    )
    p.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG", help="one more #SBATCH option")
    p.add_argument(
        "--no-init", action="store_true", help="no init as the container's PID 1 (docker run --init)"
    )
    jit = p.add_mutually_exclusive_group()
    jit.add_argument(
        "--jit-cache",
        metavar="DIR",
        help=f"each node's host JIT cache, mounted over the image's (default {jobs.DEFAULT_JIT_CACHE_ROOT}/<image>)",
    )
    jit.add_argument("--no-jit-cache", action="store_true", help="keep the JIT caches in the container")
    p.add_argument(
        "--no-exclusive", action="store_true", help="share the nodes with other jobs (no --exclusive)"
    )
    p.add_argument(
        "--no-gpu-request",
        action="store_true",
        help="request no GPUs from SLURM (--gpus-per-node); use --sbatch-arg",
    )
    p.add_argument(
        "-o",
        "--output",
        type=arguments.output_file_or_stdout,
        metavar="FILE|-",
        help="write the script here, executable (default, or -: stdout)",
    )


def _request(args: argparse.Namespace, recorded: RecordedImage | None) -> jobs.JobRequest:
    """The job as asked: --image or --archive and --recipe, or what the build record names (--from-record)."""
    default = SPECS["RECIPE"].default
    image: jobs.PulledImage | jobs.ArchivedImage
    if recorded is not None:
        image, recipe = recorded.image, recorded_recipe(args.recipe, recorded, default)
    elif args.archive is not None:
        image, recipe = read_archive(args.archive), args.recipe or default
    else:
        image, recipe = jobs.PulledImage(reference=args.image), args.recipe or default
    return jobs.JobRequest(
        nodes=args.nodes,
        recipe=recipe,
        variant=args.variant,
        model_path=args.model_path,
        image=image,
        job_name=args.job_name,
        partition=args.partition,
        time=args.time,
        # The submitter's relative path means their current directory; the job must get it absolute.
        log_dir=None if args.log_dir is None else str(args.log_dir.absolute()),
        benchmark_cmd=args.benchmark_cmd,
        gpu_devices=not args.no_devices,
        serve_port=args.serve_port,
        master_port=args.master_port,
        barrier_port=args.barrier_port,
        barrier_timeout_s=args.barrier_timeout,
        stop_timeout_s=args.stop_timeout,
        shm_size=args.shm_size,
        ulimits=tuple(args.ulimit),
        env=tuple(args.env),
        pass_env=tuple(args.pass_env),
        docker_args=tuple(args.docker_arg),
        rdma_libs=tuple(args.rdma_lib),
        default_rdma_libs=not args.no_default_rdma_libs,
        sbatch_args=tuple(args.sbatch_arg),
        init=not args.no_init,
        jit_cache="" if args.no_jit_cache else args.jit_cache,
        exclusive=not args.no_exclusive,
        gpu_request=not args.no_gpu_request,
        runtime=args.runtime,
    )


def slurm_document(job: jobs.Job, *, output: Path | None, script: str | None) -> dict[str, object]:
    """What `slurm --json` prints: the job's shape, and the script itself when it went to no file."""
    image = job.image
    return {
        "output": None if output is None else str(output),
        "script": script,
        "job_name": job.job_name,
        "nodes": job.nodes,
        "recipe": job.recipe,
        "variant": job.variant,
        "image": image.reference if isinstance(image, jobs.PulledImage) else None,
        "archive": image.manifest if isinstance(image, jobs.ArchivedImage) else None,
        "image_id": image.image_id if isinstance(image, jobs.ArchivedImage) else None,
        "jit_cache": job.jit_cache or None,
        "runtime": job.runtime,
    }


def run(args: argparse.Namespace) -> int:
    recorded = read_record(args.from_record, args.recipe_arch) if args.from_record is not None else None
    job = jobs.make_job(_request(args, recorded))
    arch = args.recipe_arch or (recorded.arch if recorded is not None else None)
    here = Path.cwd().absolute()  # the -C project's, or the one the command runs in
    starts: tuple[Path, ...]
    if recorded is not None and args.recipe_arch is None:
        starts, given_by = (recorded.record.parent.absolute(), here), f"--from-record {recorded.record}"
    else:
        starts, given_by = (here,), f"--arch {arch}"
    with arch_recipes_dir(arch, starts=starts, given_by=given_by) as recipes:
        topology = check_topology(job, recipes)
    text = render_script(job, topology, version=__version__)
    if recorded is not None:  # said once every value passed: a refused job shows only its one line
        logger.info("%s", recorded.chosen)
    if args.output is None:
        if args.json:  # stdout is the document: the script is in it
            write_json(slurm_document(job, output=None, script=text))
        else:
            write_text(text)
        return 0
    # Complete or absent, and executable: a script half-written by a full disk must not be submitted.
    with atomic_file(args.output, mode=0o755) as out:
        out.write(text.encode("utf-8"))
    logger.info("wrote %s: submit it with `sbatch %s`", args.output, args.output)
    if args.json:
        write_json(slurm_document(job, output=args.output, script=None))
    return 0

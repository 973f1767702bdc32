"""The serve launcher bundled into the image: a standard-library-only package; `serve.py` is its
entry point (see its docstring for how it runs outside an installed imagebuild).

text       characters no value may hold (imagebuild's checks use it too), a value as shown
values     parsers of raw input strings           inputs    the INPUTS table (--help), Inputs
flags      vLLM flags the launcher owns, kinds    recipes   TOML recipes -> Recipe
slurm      the SLURM allocation, hostlists        topology  nodes, rank, head, TP x PP checks
argv       vLLM's env and command line (pure)     plan      everything decided before a start
render     dry run (marker format), JSON
barrier    container barrier over TCP             sentinel  the head's shutdown sentinel
jit_locks  stale JIT lock cleanup                 process   process groups, teardown, signals
node       running the head or a worker           cli       options, the one exit point
"""

"""`imagebuild slurm`: an sbatch script that starts the image's launcher on every node of a job.

job      the job's values, each checked by its kind          recipe   the recipe's topology, via the launcher
archive  the manifest of a registry-less job's archive       script   the sbatch script (pure rendering)
from_record  the image and recipe a build record names (what publish or export noted in it)
arch_recipes the recipes of the image's arch (the launcher's, as the arch profile changes them)

The command line is ``imagebuild.cli.slurm``. May import: distribute, render (the arch's recipes),
project, launcher, pins, inputs and below.
"""

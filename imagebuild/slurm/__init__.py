"""`imagebuild slurm`: an sbatch script that starts the image's launcher on every node of a job.

job      the job's values, each checked by its kind          recipe   the recipe's topology, via the launcher
archive  the manifest of a registry-less job's archive       script   the sbatch script (pure rendering)
from_record  the image and recipe a build record names (what publish or export noted in it)

The command line is ``imagebuild.cli.slurm``. May import: distribute, project, launcher, pins, inputs and below.
"""

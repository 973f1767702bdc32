"""What a checkout defines, read and checked: stages/, the arch profiles, pylock.toml, and the kinds of value.

schema       strict reading of TOML tables (unknown keys with suggestions, types, kinds)
values       what each kind of value may look like, and how it is quoted where it lands
references   docker's image reference grammar
layout       shared facts defined once: image paths, labels, defaults, file names
arch         arch profiles (stages/arch/NAME.toml)
arch_recipe  a profile's launcher recipe overlays, applied to a recipe, and its topology check
profile      a profile applied to the stages: omitted steps, its donor stage, step text
stage_model  the image's steps as typed data
stages       stages/: loading and checking the steps
python_lock  pylock.toml: the hash-locked Python packages
debian       Debian's grammars: package names, versions, suites, snapshot IDs
apt_lock     apt.lock.toml: the exact OS packages step 4 installs from the apt snapshot

May import: errors, secrets, log, util, launcher (the recipe inputs a profile may set). Nothing
here knows pins, the engine or rendering.
"""

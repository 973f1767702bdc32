"""Step 4's OS packages: exactly apt.lock.toml's set, from the apt pin's snapshot only.

The rendered lines, chained like every other command:

1. the base's own sources (sources.list and everything in sources.list.d: the ROCm repository on
   the real base) are moved aside, and one list names the snapshot (``ARCHIVE/ID/``) with the
   archive key as ``signed-by`` (apt verifies the Release signature; never ``trusted=yes``;
   ``check-valid-until=no`` because a snapshot's Release is old by design, its date is the pin);
2. ``apt-get update``; then ``apt-get -s install name=version ...`` of the locked set: a version
   the snapshot lacks fails here with apt's message naming the package, and every package apt
   would install that the lock does not hold fails the step, named;
3. the install itself; dpkg's versions of the locked packages compared with the lock;
4. the base's sources put back, the snapshot list removed.

Without a locked snapshot (only under ``--allow-unpinned``, the header says so) the step installs
the names as the base's sources serve them, over https, as it did before the apt pin existed.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.errors import ConfigError
from imagebuild.inputs.apt_lock import AptLock, AptPackage
from imagebuild.inputs.arch import ArchProfile
from imagebuild.inputs.debian import DEB_PACKAGE, DEB_VERSION, INST_TO_REQUIREMENT, SNAPSHOT_LIST
from imagebuild.inputs.stage_model import ImageDefinition, Step
from imagebuild.inputs.values import shell_word
from imagebuild.pins import AptPin, PinSet
from imagebuild.pins.apt import apt_pin, check_lock_agrees

ASIDE = "/etc/apt/imagebuild-set-aside"
LOCKED_LIST = "/tmp/imagebuild-apt-locked.txt"
PLAN_FILE = "/tmp/imagebuild-apt-plan.txt"
APT_INSTALL = "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends"


@dataclass(frozen=True, kw_only=True)
class AptSelection:
    """What the apt install renders: the locked packages of the target's dpkg architecture.

    ``packages`` is None when the snapshot is not locked (rendered only under --allow-unpinned).
    """

    packages: tuple[AptPackage, ...] | None
    unpinned: str | None = None  # why not, for the header's UNPINNED line


def select_apt(
    definition: ImageDefinition,
    pins: PinSet,
    arch: ArchProfile,
    lock: AptLock | None,
    *,
    allow_unpinned: bool,
) -> AptSelection | None:
    """The apt lock's entry this render installs (None: no step installs OS packages).

    A lock that disagrees with pins.toml or the stage is refused (one line, exit 2) like an edited
    pin; under --allow-unpinned the step installs by name instead, and the header says so.
    """
    found = definition.apt_step()
    if found is None:
        return None
    step, command = found
    pin = apt_pin(pins, command, step)
    if pin.snapshot is None or pin.edited:
        return AptSelection(packages=None, unpinned=None)  # check_pinned lists the pin itself
    base = pins.image(definition.base_pin)
    try:
        entry = check_lock_agrees(
            lock,
            pin,
            pins_path=pins.path,
            architecture=arch.deb_architecture,
            base=base.platform_digest,
            requested=step.apt_packages,
        )
    except ConfigError as e:
        if not allow_unpinned:
            raise
        return AptSelection(packages=None, unpinned=f"{pin.name} packages ({e})")
    return AptSelection(packages=entry.packages)


def apt_lines(step: Step, pin: AptPin, selection: AptSelection | None) -> list[str]:
    """The shell lines of the step's { apt = PIN } command."""
    if selection is None or selection.packages is None:
        return _by_name(step.apt_packages)
    words = " ".join(shell_word(_requirement(p, step)) for p in selection.packages)
    source = (
        f"deb [signed-by={pin.signed_by} check-valid-until=no] ${{{pin.arg_prefix}_SNAPSHOT_URL}} "
        f"{pin.suite} {pin.components_text}"
    )
    snapshot = pin.snapshot or ""
    return [
        f"mkdir -p {ASIDE}/sources.list.d",
        f"if [ -e /etc/apt/sources.list ]; then mv /etc/apt/sources.list {ASIDE}/; fi",
        f"find /etc/apt/sources.list.d -mindepth 1 -maxdepth 1 -exec mv -t {ASIDE}/sources.list.d/ {{}} +",
        f'echo "{source}" > {SNAPSHOT_LIST}',
        "apt-get update",
        f"printf '%s\\n' {words} | LC_ALL=C sort > {LOCKED_LIST}",
        f"{{ xargs -a {LOCKED_LIST} apt-get -s install -y --no-install-recommends > {PLAN_FILE} || {{ echo "
        f"\"imagebuild: apt cannot install apt.lock.toml's packages from snapshot {snapshot} (see apt's error "
        f'above: a version the snapshot lacks names its package); run imagebuild lock" >&2; exit 1; }}; }}',
        f"unexpected=\"$(sed -n '{INST_TO_REQUIREMENT}' {PLAN_FILE} | grep -vxF -f {LOCKED_LIST} | tr '\\n' ' ' || true)\"",
        '{ [ -z "$unexpected" ] || { echo "imagebuild: apt would install packages apt.lock.toml does not '
        'hold: $unexpected(run imagebuild lock)" >&2; exit 1; }; }',
        f"xargs -a {LOCKED_LIST} env {APT_INSTALL}",
        f"cut -d= -f1 {LOCKED_LIST} | xargs dpkg-query -W -f='${{Package}}=${{Version}}\\n' | LC_ALL=C sort | cmp -s - {LOCKED_LIST} "
        f'|| {{ echo "imagebuild: the installed OS packages differ from apt.lock.toml" >&2; exit 1; }}',
        f"rm -f {SNAPSHOT_LIST} {LOCKED_LIST} {PLAN_FILE}",
        f"find {ASIDE}/sources.list.d -mindepth 1 -maxdepth 1 -exec mv -t /etc/apt/sources.list.d/ {{}} +",
        f"if [ -e {ASIDE}/sources.list ]; then mv {ASIDE}/sources.list /etc/apt/; fi",
        f"rm -rf {ASIDE}",
    ]


def _requirement(package: AptPackage, step: Step) -> str:
    """name=version, each part checked by Debian's grammar again where it reaches the RUN line."""
    DEB_PACKAGE.check(package.name, f"{step.source} (apt lock)", "name")
    DEB_VERSION.check(package.version, f"{step.source} (apt lock)", "version")
    return package.requirement


def _by_name(names: tuple[str, ...]) -> list[str]:
    """Unlocked (--allow-unpinned only): the names as the base's sources serve them, over https."""
    return [
        'for list in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do if [ -f "$list" ]; then sed -i "s|http://|https://|g" "$list"; fi; done',
        "apt-get update",
        f"{APT_INSTALL} {' '.join(names)}",
    ]

"""What a correctly built image must contain, derived from the build's own inputs.

Every expected value comes from pins.toml, the arch profile, constraints/ and the
stages (which ENV they set, which lines they append to versions.txt), so verify
cannot drift from what the build was asked to do. The result is a frozen,
JSON-able dataclass in a few parts, one per kind of check: the runner hands it
to the in-container checks as a file. What every correct image holds whatever
the inputs (the paths in ``imagebuild.inputs.layout``, the graft's trees and the
scrubbed paths in ``imagebuild.verify.image_facts``) is not part of it: the checks
read those where they are defined.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from imagebuild.errors import ConfigError
from imagebuild.inputs.layers import DISABLED, layer_enabled
from imagebuild.inputs.layout import (
    APP_DIR,
    ARCH_LABEL,
    LAUNCHER_RECIPE,
    NIXL_LIBRARIES,
    PIN_LABEL_PREFIX,
    SECRET_SCAN_ROOTS,
    VERSIONS_FILE,
)
from imagebuild.inputs.stage_model import GUARD_GROUP, ImageDefinition, Shell
from imagebuild.project import Inputs
from imagebuild.render import build_constraint_text
from imagebuild.render.context import arch_recipes
from imagebuild.verify.image_facts import REPINNED_PIN, TUNED_CONFIGS
from imagebuild.verify.launcher_cases import LauncherCase, banned_env_names, launcher_cases

# `echo "KEY=${ARG} rest" >> /app/versions.txt` in a stage's RUN commands.
_VERSION_ECHO_RE = re.compile(r'^echo "(?P<line>[^"]*)" >> ' + re.escape(VERSIONS_FILE) + "$")
_KEY_RE = re.compile(r"^(?P<key>[A-Z][A-Z0-9_]*)(?P<sep>[=:])\s*(?P<rest>.*)$")
_ARG_RE = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")


@dataclass(frozen=True, kw_only=True)
class VersionLine:
    """One line a stage appends to versions.txt."""

    key: str  # MORI_REF
    sep: str = "="  # "=" for KEY=value lines, ":" for KEY: text lines
    value: str  # the exact first word after '=' (a SHA, a version), or the whole literal line's rest
    rest: str = ""  # what follows the value, e.g. "(after proven_k3 graft)"
    pin: str | None = None  # the pin the value comes from; None for literal lines
    step: str = ""  # where it is written, for messages

    @property
    def text(self) -> str:
        return f"{self.key}{self.sep}{' ' if self.sep == ':' else ''}{self.value}{' ' + self.rest if self.rest else ''}"


@dataclass(frozen=True, kw_only=True)
class ConfigExpectations:
    """The image config: the WORKDIR and ENV the stages set, the labels that name the pins."""

    workdir: str
    env: Mapping[str, str]  # exact values the stages set
    banned_env_names: tuple[str, ...]  # the launcher recipe's env keys: tuning the image must not bake in
    labels: Mapping[str, str]  # exact values: the arch and every locked pin's identity
    unlocked_pins: Mapping[str, str]  # pin -> why its label cannot be checked

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ConfigExpectations:
        return cls(
            workdir=data["workdir"],
            env=dict(data["env"]),
            banned_env_names=tuple(data["banned_env_names"]),
            labels=dict(data["labels"]),
            unlocked_pins=dict(data["unlocked_pins"]),
        )


@dataclass(frozen=True, kw_only=True)
class VersionsExpectations:
    """versions.txt: the line each stage appends, with the pins' identities resolved."""

    lines: tuple[VersionLine, ...]
    forbidden_text: tuple[str, ...]  # what a layer the build args switch off would have written

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VersionsExpectations:
        return cls(
            lines=tuple(VersionLine(**line) for line in data["lines"]),
            forbidden_text=tuple(data["forbidden_text"]),
        )


@dataclass(frozen=True, kw_only=True)
class ConstraintExpectations:
    """The build-toolchain constraint: the two files' content and the setuptools it allows."""

    constraints: str  # constraints/*.txt
    build_constraints: str  # the constraint plus the locked build dependencies' exact versions
    setuptools_specifier: str  # "" when constraints/ do not bound setuptools
    guard_setuptools: str | None  # the version the guard installs when the base's violates the constraint

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ConstraintExpectations:
        return cls(**data)


@dataclass(frozen=True, kw_only=True)
class PythonExpectations:
    """The base's python (pin [base]), where the graft lands, and the dist re-pinned over the graft."""

    version: str  # "3.12"
    site_packages: str
    repinned_version: str  # pin [REPINNED_PIN]'s version

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PythonExpectations:
        return cls(**data)


@dataclass(frozen=True, kw_only=True)
class GraftExpectations:
    """What the arch profile says the graft holds: its tuned configs, and whether a pin replaced a tree."""

    tuned_configs: tuple[str, ...]
    repinned: (
        str | None
    )  # the pin re-installed over the grafted tree (RECORD-checked); None: the donor's is kept

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GraftExpectations:
        return cls(tuned_configs=tuple(data["tuned_configs"]), repinned=data["repinned"])


@dataclass(frozen=True, kw_only=True)
class Expectations:
    """What the in-image checks compare against: only what the inputs decide.

    The facts that are the same for every build (paths in the image, label names, the graft's
    trees) are not copied in here: the checks read them where they are defined, in
    ``imagebuild.inputs.layout`` and this module's constants.
    """

    image: str
    arch: str
    pins_path: str  # named in the checks' messages: where a pin's expected value comes from
    config: ConfigExpectations
    versions: VersionsExpectations
    constraint: ConstraintExpectations
    python: PythonExpectations
    launcher_cases: tuple[LauncherCase, ...]
    secret_scan_roots: tuple[str, ...]  # verify --scan-root
    graft: GraftExpectations = GraftExpectations(tuned_configs=TUNED_CONFIGS, repinned=REPINNED_PIN)
    # name=version of every OS package apt.lock.toml locks for this arch (empty: no apt lock)
    apt_packages: tuple[str, ...] = ()
    # The shared libraries an optional layer installed (step 10 with WITH_NIXL=1); () when it is off.
    layer_libraries: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Expectations:
        return cls(
            image=data["image"],
            arch=data["arch"],
            pins_path=data["pins_path"],
            config=ConfigExpectations.from_json(data["config"]),
            versions=VersionsExpectations.from_json(data["versions"]),
            constraint=ConstraintExpectations.from_json(data["constraint"]),
            python=PythonExpectations.from_json(data["python"]),
            apt_packages=tuple(data.get("apt_packages", ())),
            launcher_cases=tuple(
                LauncherCase(name=c["name"], env=dict(c["env"]), argv=tuple(c["argv"]))
                for c in data["launcher_cases"]
            ),
            secret_scan_roots=tuple(data["secret_scan_roots"]),
            graft=GraftExpectations.from_json(data["graft"]),
            layer_libraries=tuple(data.get("layer_libraries", ())),
        )


NIXL_ARG = "WITH_NIXL"  # the tunable of step 10's optional layer (stages/10-nixl.toml enabled_by)
NIXL_DONE = "WITH_NIXL build complete"  # the versions.txt line only a WITH_NIXL=1 build writes


def substitute(value: str, args: Mapping[str, str]) -> str | None:
    """``value`` with ${ARG} replaced from ``args``; None when it names something else (a base ENV)."""
    names = _ARG_RE.findall(value)
    if any(name not in args for name in names):
        return None
    return _ARG_RE.sub(lambda m: args[m[1]], value)


def build_args(inputs: Inputs) -> dict[str, str]:
    """The ARG values a default build of ``inputs`` uses (tunables, arch, pins)."""
    return {**dict(inputs.definition.spec.args), **inputs.arch.build_args(), **inputs.pins.build_args()}


def expected_env(definition: ImageDefinition, args: Mapping[str, str]) -> dict[str, str]:
    """ENV the stages set whose value is fully known (values built on a base ENV such as PATH are not)."""
    env: dict[str, str] = {}
    for step in definition.steps:
        for name, raw in (*step.env, *step.env_after):
            value = substitute(raw, args)
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
    return env


def expected_version_lines(definition: ImageDefinition, inputs: Inputs) -> tuple[VersionLine, ...]:
    """The lines the stages append to versions.txt, with ${ARG} resolved to pin identities."""
    args = build_args(inputs)
    owners = inputs.pins.arg_owner()
    lines: list[VersionLine] = []
    for step in definition.steps:
        for command in step.commands:
            if not isinstance(command, Shell):
                continue
            echo = _VERSION_ECHO_RE.match(command.text)
            if echo is None:
                continue
            raw = echo["line"]
            parsed = _KEY_RE.match(raw)
            if parsed is None:
                continue
            text = substitute(raw, args)
            if text is None:
                msg = f"{step.source}: versions.txt line {raw!r} uses an ARG no pin, arch or tunable defines"
                raise ConfigError(msg)
            key, sep, rest = _KEY_RE.match(text).group("key", "sep", "rest")  # type: ignore[union-attr]
            arg_names = _ARG_RE.findall(parsed["rest"])
            pin = next((owners[a].name for a in arg_names if a in owners), None)
            value, _, tail = rest.partition(" ") if sep == "=" else (rest, "", "")
            lines.append(VersionLine(key=key, sep=sep, value=value, rest=tail, pin=pin, step=step.label))
    return tuple(lines)


def is_banned_env(name: str, names: Iterable[str], patterns: Iterable[str], allowed: Iterable[str]) -> bool:
    """A tuning ENV: a recipe key or a banned pattern, unless the build itself sets it."""
    from fnmatch import fnmatchcase

    if name in set(allowed):
        return False
    return name in set(names) or any(fnmatchcase(name, p) for p in patterns)


def setuptools_specifier(constraints: str) -> str:
    specs = []
    for line in constraints.splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            req = Requirement(text)
            if canonicalize_name(req.name) == "setuptools" and str(req.specifier):
                specs.append(str(req.specifier))
    return ",".join(specs)


def build_expectations(
    inputs: Inputs,
    *,
    image: str,
    recipes_dir: Path | None = None,
    secret_scan_roots: tuple[str, ...] = SECRET_SCAN_ROOTS,
) -> Expectations:
    if recipes_dir is not None:
        return _expectations(inputs, image=image, recipes=recipes_dir, secret_scan_roots=secret_scan_roots)
    # The recipes the arch's image carries: the launcher's, as the arch profile changes them.
    with tempfile.TemporaryDirectory(prefix="imagebuild-recipes-") as directory:
        for name, text in arch_recipes(inputs.arch).items():
            (Path(directory) / name).write_text(text, encoding="utf-8")
        return _expectations(
            inputs, image=image, recipes=Path(directory), secret_scan_roots=secret_scan_roots
        )


def _expectations(
    inputs: Inputs, *, image: str, recipes: Path, secret_scan_roots: tuple[str, ...]
) -> Expectations:
    pins = inputs.pins
    base = pins.image(inputs.definition.base_pin)
    graft = inputs.arch.graft
    repinned_pin = graft.repinned if graft else REPINNED_PIN
    repinned = next((p for p in pins if p.name == repinned_pin), None)
    repinned_version = str(getattr(repinned, "version", ""))
    args = build_args(inputs)
    env = expected_env(inputs.definition, args)
    labels = {ARCH_LABEL: inputs.arch.name}
    unlocked: dict[str, str] = {}
    for pin in pins:
        if pin.identity is None:
            unlocked[pin.name] = f"[{pin.name}] ({pin.tracked}) has no immutable identity in {pins.path}"
        else:
            labels[f"{PIN_LABEL_PREFIX}{pin.name}"] = pin.identity
    forbidden = (NIXL_DONE,) if args.get(NIXL_ARG, DISABLED) == DISABLED else ()
    workdir = next((s.path for s in inputs.definition.steps if s.path), APP_DIR)
    guard = inputs.python_lock.group(GUARD_GROUP) if inputs.python_lock else ()
    guard_setuptools = next((p.version for p in guard if p.name == "setuptools"), None)
    return Expectations(
        image=image,
        arch=inputs.arch.name,
        pins_path=str(pins.path),
        config=ConfigExpectations(
            workdir=workdir,
            env=env,
            banned_env_names=banned_env_names(recipes, LAUNCHER_RECIPE),
            labels=labels,
            unlocked_pins=unlocked,
        ),
        versions=VersionsExpectations(
            lines=expected_version_lines(inputs.definition, inputs), forbidden_text=forbidden
        ),
        constraint=ConstraintExpectations(
            constraints=inputs.constraints,
            build_constraints=build_constraint_text(inputs.constraints, inputs.python_lock),
            setuptools_specifier=setuptools_specifier(inputs.constraints),
            guard_setuptools=guard_setuptools,
        ),
        python=PythonExpectations(
            version=base.python, site_packages=base.site_packages, repinned_version=repinned_version
        ),
        launcher_cases=launcher_cases(recipes),
        secret_scan_roots=secret_scan_roots,
        graft=GraftExpectations(
            tuned_configs=graft.tuned_configs if graft else TUNED_CONFIGS, repinned=repinned_pin
        ),
        apt_packages=_locked_apt_packages(inputs),
        layer_libraries=NIXL_LIBRARIES if _nixl_enabled(inputs.definition) else (),
    )


def _locked_apt_packages(inputs: Inputs) -> tuple[str, ...]:
    """What apt.lock.toml says step 4 installed for this arch, when the image was built from it."""
    entry = inputs.apt_lock.get(inputs.arch.deb_architecture) if inputs.apt_lock else None
    return tuple(p.requirement for p in entry.packages) if entry else ()


def _nixl_enabled(definition: ImageDefinition) -> bool:
    tunables = dict(definition.spec.args)
    return any(layer_enabled(s, tunables) for s in definition.steps if s.layer and s.layer.arg == NIXL_ARG)


def parse_versions(text: str) -> list[tuple[str, str, str]]:
    """versions.txt as (key, rest, whole line) in file order; lines without KEY= or KEY: are skipped."""
    entries = []
    for raw in text.splitlines():
        line = " ".join(raw.split())
        m = _KEY_RE.match(line)
        if m:
            entries.append((m["key"], m["rest"], line))
    return entries

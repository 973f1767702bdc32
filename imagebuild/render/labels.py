"""The labels a built image carries, as the Dockerfile's closing LABEL: a pure function of the inputs.

Most values are fixed by the inputs (a pin's identity, the arch, imagebuild's
version, the inputs digest) and are written into the Dockerfile's closing LABEL.
The checkout's facts (remote, revision, commit time) cannot be: a committed file
cannot hold its own commit. Those labels take their values from build ARGs
(imagebuild.inputs.layout.CHECKOUT_LABEL_ARGS) that ``imagebuild build`` passes
(``imagebuild.build.checkout_labels`` asks git for them); a plain ``docker build``
passes them by hand (README) or records "unknown". Anyone who can pull the image
reads its labels, so a value that looks like a credential is refused.
"""

from __future__ import annotations

from imagebuild import __version__
from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import (
    ARCH_LABEL,
    CHECKOUT_LABEL_ARGS,
    CHECKOUT_LABEL_DEFAULT,
    PIN_LABEL_PREFIX,
    VERSION_LABEL,
)
from imagebuild.inputs.values import control_problem, dockerfile_literal, quoted_template, shown
from imagebuild.project import Inputs
from imagebuild.secrets import value_secret_reason


def fixed_labels(inputs: Inputs, extra: dict[str, str]) -> dict[str, str]:
    """The labels the inputs fix, for the Dockerfile; a pin without an identity says so loudly."""
    labels = {ARCH_LABEL: inputs.arch.name, VERSION_LABEL: __version__, **extra}
    for pin in inputs.pins:
        labels[f"{PIN_LABEL_PREFIX}{pin.name}"] = pin.identity or f"UNPINNED {pin.tracked}"
    check_label_values(labels)
    return labels


def label_block(fixed: dict[str, str]) -> str:
    """The Dockerfile's closing ARGs and LABEL: fixed values literally, the checkout's from build args.

    Last, so a new revision changes only this metadata-only layer. One LABEL instruction, not the
    engine's labels option: the classic builder commits each of those as a step of its own.
    A fixed value is a Dockerfile literal (no ``$`` expands); a checkout label is the one
    reference ``"${ARG}"``, which docker substitutes without re-reading quotes.
    """
    check_label_values(fixed)
    values = {key: dockerfile_literal(value) for key, value in fixed.items()}
    for label, arg in CHECKOUT_LABEL_ARGS.items():
        values[label] = quoted_template(f"${{{arg}}}")
    args = "".join(
        f"ARG {arg}={dockerfile_literal(CHECKOUT_LABEL_DEFAULT)}\n" for arg in CHECKOUT_LABEL_ARGS.values()
    )
    pairs = " \\\n      ".join(f"{dockerfile_literal(k)}={values[k]}" for k in sorted(values))
    return (
        "\n# Labels. The inputs fix every value but the checkout's (remote, revision, commit time), which\n"
        "# a committed file cannot hold: `imagebuild build` passes them as these build args (plain\n"
        f"# docker: see the README); without them they read {CHECKOUT_LABEL_DEFAULT!r}.\n"
        f"{args}LABEL {pairs}\n"
    )


def check_label_values(labels: dict[str, str]) -> None:
    """Every label key and value is one line of text with no credential in it (ConfigError otherwise)."""
    for key, value in labels.items():
        problem = control_problem(key) or control_problem(value)
        if problem:
            msg = f"label {shown(key)} = {shown(value)}: {problem}; control characters are not allowed in a label"
            raise ConfigError(msg)
    refuse_credentials(labels)


def refuse_credentials(labels: dict[str, str]) -> None:
    for key, value in labels.items():
        reason = value_secret_reason(value, f"image label {key}")
        if reason:
            msg = f"{reason}: labels are readable by anyone who can pull the image; remove the credential from its source"
            raise ConfigError(msg)

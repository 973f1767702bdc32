"""Image config: ENTRYPOINT, WORKDIR, the ENV the stages set, no baked tuning, labels = pins."""

from __future__ import annotations

import pytest

from imagebuild.inputs.layout import PIN_LABEL_PREFIX
from imagebuild.verify.checks.support import expect, expectations, image_config
from imagebuild.verify.expectations import is_banned_env
from imagebuild.verify.image_facts import BANNED_ENV_PATTERNS, NONEMPTY_LABELS

EXP = expectations()


def test_entrypoint_empty() -> None:
    entrypoint = image_config().entrypoint
    # madengine runs its own command: a non-empty ENTRYPOINT made its runs exit at once.
    expect(not entrypoint, "ENTRYPOINT must be empty", expected="[]", found=entrypoint)


def test_workdir() -> None:
    found = image_config().workdir
    expect(found == EXP.config.workdir, "WORKDIR", expected=EXP.config.workdir, found=found or "(none)")


@pytest.mark.parametrize("name", sorted(EXP.config.env))
def test_env(name: str) -> None:
    env = image_config().env
    found = env.get(name)
    expect(
        found == EXP.config.env[name],
        f"ENV {name} (set by the stages)",
        expected=f"{name}={EXP.config.env[name]}",
        found=f"{name}={found}" if found is not None else f"{name} unset",
    )


def test_no_tuning_env() -> None:
    env = image_config().env
    baked = sorted(
        f"{k}={v}"
        for k, v in env.items()
        if is_banned_env(k, EXP.config.banned_env_names, BANNED_ENV_PATTERNS, EXP.config.env)
    )
    expect(
        not baked,
        "runtime tuning ENV baked into the image (it would override the launcher recipe, which is skip-if-set)",
        expected=f"none of the recipe's env keys nor {', '.join(BANNED_ENV_PATTERNS)}",
        found=", ".join(baked),
    )


@pytest.mark.parametrize("label", sorted(EXP.config.labels))
def test_label(label: str) -> None:
    found = image_config().labels.get(label)
    expect(
        found == EXP.config.labels[label],
        f"label {label}",
        expected=EXP.config.labels[label],
        found=found if found is not None else "(no such label)",
    )


@pytest.mark.parametrize("label", NONEMPTY_LABELS)
def test_label_set(label: str) -> None:
    found = image_config().labels.get(label)
    expect(bool(found), f"label {label}", expected="a non-empty value", found=found or "(missing)")


def test_pins_locked() -> None:
    labels = image_config().labels
    found = [
        f"{reason} (image label {labels.get(PIN_LABEL_PREFIX + pin)!r})"
        for pin, reason in EXP.config.unlocked_pins.items()
    ]
    expect(
        not found,
        "every pin's label can be checked only against a locked pin; run `imagebuild lock`",
        expected="an immutable identity for every pin in pins.toml",
        found="; ".join(found),
    )


def test_no_foreign_pin_labels() -> None:
    extra = sorted(
        k for k in image_config().labels if k.startswith(PIN_LABEL_PREFIX) and k not in EXP.config.labels
        and k.removeprefix(PIN_LABEL_PREFIX) not in EXP.config.unlocked_pins
    )  # fmt: skip
    expect(
        not extra,
        f"pin labels for pins that {EXP.pins_path} does not have (built from other pins?)",
        expected="one io.imagebuild.pin.<name> label per pin",
        found=", ".join(extra),
    )

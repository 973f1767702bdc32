"""The CycloneDX SBOM: valid, every pin with its identity, one pin change is one component change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagebuild.build.sbom import make_sbom, validate_sbom
from imagebuild.errors import AttestationError
from tests.unit.attest_support import CONTENTS, IMAGE_ID, INPUTS, SITE, build_record, lock, pin_data, pins

GOLDEN = Path(__file__).parent / "golden" / "sbom.cdx.json"


def components(text: str) -> dict[str, dict[str, Any]]:
    return {c["bom-ref"]: c for c in json.loads(text)["components"]}


def properties(component: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


def test_sbom_is_valid_cyclonedx_16_and_deterministic() -> None:
    text = make_sbom(build_record(), CONTENTS)
    validate_sbom(text)
    doc = json.loads(text)
    assert (doc["bomFormat"], doc["specVersion"]) == ("CycloneDX", "1.6")
    assert make_sbom(build_record(), CONTENTS) == text
    image = doc["metadata"]["component"]
    assert image["version"] == IMAGE_ID
    assert properties(image)["imagebuild:inputs-digest"] == INPUTS
    assert doc["metadata"]["timestamp"] == "2026-11-30T12:01:30+00:00"


def test_sbom_matches_the_golden_file() -> None:
    """Byte for byte: the golden file was made before each kind of pin described itself (Pin.describe).

    Regenerate it after an intended change with
    PYTHONPATH=. python -c "from tests.unit.attest_support import CONTENTS, build_record; from imagebuild.build.sbom import make_sbom; print(make_sbom(build_record(), CONTENTS), end='')" > tests/unit/golden/sbom.cdx.json
    """
    assert make_sbom(build_record(), CONTENTS) == GOLDEN.read_text(encoding="utf-8")


def test_every_pin_appears_with_its_identity() -> None:
    found = components(make_sbom(build_record(), CONTENTS))
    pinset = pins()
    for pin in pinset:
        component = found[f"pin:{pin.name}"]
        assert properties(component)["imagebuild:pin"] == pin.name
    assert found["pin:base"]["purl"].startswith("pkg:oci/vllm-dev@sha256:1111")
    assert found["pin:base"]["hashes"] == [{"alg": "SHA-256", "content": "1" * 64}]
    mori = found["pin:mori"]
    assert mori["version"] == pinset.get("mori").identity
    assert mori["hashes"] == [{"alg": "SHA-1", "content": pinset.get("mori").identity}]
    assert "vcs_url=git%2Bgit://127.0.0.1:55418/ROCm/mori.git" in mori["purl"]
    assert found["pin:aiter"]["hashes"] == [{"alg": "SHA-256", "content": "4" * 64}]
    assert found["pin:flydsl"]["purl"].startswith(
        "pkg:pypi/flydsl@0.2.4?file_name=flydsl-0.2.4-py3-none-any.whl"
    )
    assert found["pin:rust"]["version"] == "1.88.0"


def test_every_locked_package_has_purl_and_sha256() -> None:
    found = components(make_sbom(build_record(), CONTENTS))
    for package in lock().packages:
        if package.name == "flydsl":  # the pin's component, with the lock's groups
            assert properties(found["pin:flydsl"])["imagebuild:lock-groups"] == "15-flydsl-repin"
            continue
        component = found[f"pylock:{package.name}"]
        assert component["purl"].startswith(f"pkg:pypi/{package.name}@{package.version}?file_name=")
        assert component["hashes"] == [{"alg": "SHA-256", "content": package.sha256}]
        assert properties(component)["imagebuild:lock-groups"] == ",".join(package.groups)


def test_inventory_marks_what_the_image_holds() -> None:
    found = components(make_sbom(build_record(), CONTENTS))
    assert properties(found["pylock:tqdm"])["imagebuild:installed"] == "true"
    assert properties(found["pylock:wheel"])["imagebuild:installed"] == "false"  # isolated builds only
    assert properties(found["pin:aiter"])["imagebuild:installed"] == "true"  # amd_aiter, normalised
    assert properties(found["pylock:tqdm"])["imagebuild:location"] == SITE
    mori = found[f"python:{SITE}/amd-mori@1.2.2"]
    assert mori["purl"] == "pkg:pypi/amd-mori@1.2.2"
    assert properties(mori)["imagebuild:origin"] == "built image layers, not locked"
    pip = found[f"python:{SITE}/pip@23.0.1"]
    assert properties(pip)["imagebuild:origin"] == "base image"  # from the base's layer


def test_every_dpkg_package_is_a_deb_component_of_the_image_os() -> None:
    doc = json.loads(make_sbom(build_record(), CONTENTS))
    found = {c["bom-ref"]: c for c in doc["components"]}
    assert found["os"]["type"] == "operating-system"
    assert (found["os"]["name"], found["os"]["version"]) == ("debian", "12")
    debs = {ref: c for ref, c in found.items() if ref.startswith("deb:")}
    assert set(debs) == {"deb:bash:amd64", "deb:base-files:amd64", "deb:libc6:amd64"}
    assert debs["deb:bash:amd64"]["purl"] == "pkg:deb/debian/bash@5.2.15-2%2Bb2?arch=amd64&distro=debian-12"
    assert debs["deb:libc6:amd64"]["purl"].endswith("&upstream=glibc")
    assert all(properties(c)["imagebuild:origin"] == "base image" for c in debs.values())


def test_dependencies_the_image_on_everything_dpkg_and_requires_dist_where_known() -> None:
    doc = json.loads(make_sbom(build_record(), CONTENTS))
    depends = {d["ref"]: set(d.get("dependsOn", [])) for d in doc["dependencies"]}
    assert depends["image"] == {c["bom-ref"] for c in doc["components"]}
    # bash: Depends libc6, base-files | no-such-package (the alternative installed)
    assert depends["deb:bash:amd64"] == {"deb:libc6:amd64", "deb:base-files:amd64"}
    assert depends["pin:flydsl"] == {"pylock:tqdm"}  # Requires-Dist, to the lock's component


def test_the_sbom_names_the_manifest_digest_where_the_build_knows_it() -> None:
    from dataclasses import replace

    manifest = "sha256:" + "6" * 64
    doc = json.loads(make_sbom(replace(build_record(), manifest_digest=manifest), CONTENTS))
    assert properties(doc["metadata"]["component"])["imagebuild:manifest-digest"] == manifest


@pytest.mark.parametrize(
    ("pin", "field", "value"),
    [
        ("mori", "commit", "f" * 40),
        ("base", "digest", "sha256:" + "5" * 64),
        ("aiter", "sha256", "6" * 64),
    ],
)
def test_changing_one_pin_changes_exactly_that_component(pin: str, field: str, value: str) -> None:
    before = components(make_sbom(build_record(), CONTENTS))
    data = pin_data()
    data[pin][field] = value
    after = components(make_sbom(build_record(pins(data)), CONTENTS))
    assert before.keys() == after.keys()
    assert [ref for ref in before if before[ref] != after[ref]] == [f"pin:{pin}"]


def test_invalid_document_is_refused() -> None:
    doc = json.loads(make_sbom(build_record(), CONTENTS))
    doc["components"][0]["type"] = "spaceship"
    with pytest.raises(AttestationError, match=r"not valid CycloneDX 1.6"):
        validate_sbom(json.dumps(doc))

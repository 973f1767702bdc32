"""Wheel choice by packaging tags, PEP 691 / PEP 503 indexes, and the real PyPI."""

from __future__ import annotations

import pytest
from packaging.tags import Tag

from imagebuild.lock.http import FetchError, Http
from imagebuild.lock.pypi import DistFile, NoMatchingWheel, choose_wheel, list_files, target_tags
from tests.lock.servers import FileServer, IndexFile, serve_index

NAMES = [
    "flydsl-0.2.4-cp312-cp312-manylinux_2_27_x86_64.whl",
    "flydsl-0.2.4-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "flydsl-0.2.4-cp312-cp312-manylinux_2_28_aarch64.whl",
    "flydsl-0.2.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "flydsl-0.2.4-cp313-cp313-manylinux_2_27_x86_64.whl",
    "flydsl-0.2.4-cp312-cp312-musllinux_1_2_x86_64.whl",
    "flydsl-0.2.4-cp312-cp312-manylinux_2_41_x86_64.whl",
    "flydsl-0.2.3-cp312-cp312-manylinux_2_28_x86_64.whl",
    "flydsl-0.2.4.tar.gz",
]


def files(*names: str) -> list[DistFile]:
    return [DistFile(filename=n, url=f"https://x/{n}", sha256=None) for n in names]


@pytest.mark.parametrize(
    ("python", "machine", "expected"),
    [
        # the most specific manylinux that the target accepts wins over 2_17
        ("3.12", "x86_64", NAMES[0]),
        ("3.11", "x86_64", NAMES[3]),
        ("3.12", "aarch64", NAMES[2]),
    ],
)
def test_most_specific_compatible_wheel_wins(python: str, machine: str, expected: str) -> None:
    choice = choose_wheel(files(*NAMES), "FlyDSL", "0.2.4", target_tags(python, machine))
    assert choice.file.filename == expected
    assert "flydsl-0.2.3-cp312-cp312-manylinux_2_28_x86_64.whl" not in choice.candidates


def test_pure_python_wheel_is_a_fallback() -> None:
    names = ("pkg-1.0-py3-none-any.whl", "pkg-1.0-cp312-cp312-manylinux_2_17_x86_64.whl")
    assert choose_wheel(files(*names), "pkg", "1.0", target_tags("3.12", "x86_64")).file.filename == names[1]
    assert choose_wheel(files(*names), "pkg", "1.0", target_tags("3.10", "x86_64")).file.filename == names[0]


def test_target_tags_cover_manylinux_2_17_to_2_40_then_generic() -> None:
    tags = target_tags("3.12", "x86_64")
    assert tags[0] == Tag("cp312", "cp312", "manylinux_2_40_x86_64")
    assert Tag("cp312", "cp312", "manylinux2014_x86_64") in tags
    assert Tag("cp312", "abi3", "manylinux_2_28_x86_64") in tags
    assert Tag("py3", "none", "any") in tags
    assert Tag("cp312", "cp312", "manylinux_2_16_x86_64") not in tags
    assert Tag("cp312", "cp312", "manylinux_2_41_x86_64") not in tags


def test_no_matching_wheel_lists_what_exists() -> None:
    names = ("flydsl-0.2.4-cp313-cp313-manylinux_2_27_x86_64.whl", "flydsl-0.2.4.tar.gz")
    with pytest.raises(
        NoMatchingWheel, match=r"no wheel of flydsl==0\.2\.4 matches cp312-cp312-manylinux_2_40"
    ) as e:
        choose_wheel(files(*names), "flydsl", "0.2.4", target_tags("3.12", "x86_64"))
    assert "flydsl-0.2.4-cp313-cp313-manylinux_2_27_x86_64.whl, flydsl-0.2.4.tar.gz" in str(e.value)


@pytest.mark.parametrize("flavour", ["json", "html"])
def test_both_index_flavours_list_files_with_hashes(file_server: FileServer, flavour: str) -> None:
    published = [IndexFile(n, n.encode()) for n in NAMES]
    index = serve_index(file_server, "flydsl", published, flavour=flavour)
    with Http(timeout=5) as http:
        listed = list_files(http, index, "FlyDSL")
    by_name = {f.filename: f for f in listed}
    assert set(by_name) == set(NAMES)
    assert by_name[NAMES[0]].sha256 == published[0].sha256
    assert by_name[NAMES[0]].url == f"{file_server.server.url}/files/{NAMES[0]}"


def test_index_that_is_not_a_simple_api(file_server: FileServer) -> None:
    file_server.add("/plain/simple/x/", b"hi", "text/plain")
    with Http(timeout=5) as http, pytest.raises(FetchError, match="not a simple-API page"):
        list_files(http, f"{file_server.server.url}/plain/simple/", "x")


@pytest.mark.network
def test_flydsl_on_the_real_pypi() -> None:
    with Http(timeout=30) as http:
        listed = list_files(http, "https://pypi.org/simple/", "flydsl")
    choice = choose_wheel(listed, "flydsl", "0.2.4", target_tags("3.12", "x86_64"))
    assert choice.file.filename == "flydsl-0.2.4-cp312-cp312-manylinux_2_27_x86_64.whl"
    assert choice.file.sha256 == "3ba78e6c1cec37c99b83d71a34c1ed50f1058231bcab1a352a1b431082fb2c4f"

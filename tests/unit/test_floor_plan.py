"""The floor plan of imagebuild/: every import runs down the pipeline's layers, never up.

The layers are the list in imagebuild/__init__.py's docstring. A module may import its own package and
anything in a lower layer; an import of a higher layer, or of a package in the same layer, fails here
with the module and the line, so a cycle cannot creep back in. Imports under ``if TYPE_CHECKING:``
count too: a type is a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests import REPO

PACKAGE = REPO / "imagebuild"

# Bottom first. Each entry: the top-level names (packages or modules) of one layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__",),  # __version__ only
    ("errors",),
    ("secrets",),
    ("log",),
    ("util", "importer", "launcher", "image_files"),
    ("inputs", "engine"),
    ("pins",),
    ("project",),
    ("render", "lock", "attest", "scaffold"),
    ("normalize", "distribute", "verify"),
    ("diff", "build", "slurm"),
    ("testing",),
    ("cli",),
    ("__main__",),
)
LAYER_OF = {name: number for number, layer in enumerate(LAYERS) for name in layer}


def _top(module: str) -> str:
    """imagebuild.render.context -> render; imagebuild -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imagebuild module) for every absolute import of imagebuild in ``path``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "imagebuild"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "imagebuild":
            module = node.module or ""
            names = [f"{module}.{a.name}" if module == "imagebuild" else module for a in node.names]
            found += [(node.lineno, name) for name in names]
    return found


def _own_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py") if len(relative.parts) > 0 else "__init__"


def test_every_top_level_name_has_a_layer() -> None:
    names = {p.name.removesuffix(".py") for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert names == set(LAYER_OF), "a new package or module needs its place in LAYERS (and in imagebuild/__init__.py)"


def test_no_import_runs_up_or_sideways() -> None:
    upward: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _own_name(path)
        for line, module in _imports(path):
            target = "__init__" if module == "imagebuild.__version__" else _top(module)
            if target == own:
                continue
            if LAYER_OF[target] >= LAYER_OF[own]:
                upward.append(f"{path.relative_to(REPO)}:{line}: {own} (layer {LAYER_OF[own]}) imports {module} (layer {LAYER_OF[target]})")
    assert not upward, "\n".join(upward)


def test_standard_library_packages_import_nothing_of_imagebuild() -> None:
    """The importer and the launcher run where imagebuild is not installed (a node's python3, the image)."""
    for package in ("importer", "launcher", "image_files"):
        for path in sorted((PACKAGE / package).rglob("*.py")):
            assert not _imports(path), f"{path.relative_to(REPO)} imports imagebuild"


def test_only_the_engine_adapter_imports_docker_py() -> None:
    allowed = {PACKAGE / "engine" / name for name in ("docker.py", "credentials.py", "address.py")}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        modules += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0]
        if any(m.split(".")[0] == "docker" for m in modules):
            assert path in allowed, f"{path.relative_to(REPO)} imports docker-py; go through imagebuild.engine"

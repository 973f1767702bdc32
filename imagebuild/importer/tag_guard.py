"""Only the importer tags, second line: whatever a load still did to the engine's tag table is undone.

The first line is ``tar_filter``: the engine is sent a tar that carries no name (``RepoTags`` null,
no ``repositories``, no name annotations in index.json), so on the normal path a load creates no
tag at all and nothing here acts. But an engine could still name what it loads some other way (a
future load format, a store that keeps a name per import), and a moved ``victim:latest`` would be
silent. So the importer reads the tag table before the load and, whatever the load's outcome, puts
back every tag the load moved and removes every tag it created, after giving the loaded image a
name of the importer's own so that removing a foreign name never deletes it; it says so when it
had to. Tags are then applied only from the manifest, after the checks.
"""

from __future__ import annotations

from typing import Mapping, Protocol

HOLD_REPOSITORY = "imagebuild-import/held"  # the importer's own name for an image while it fixes tags


class TagTable(Protocol):
    def tag_table(self) -> dict[str, str]: ...
    def tag(self, image_id: str, name: str) -> None: ...
    def untag(self, name: str) -> None: ...


def hold_name(image_id: str) -> str:
    digest = image_id.split(":", 1)[-1]  # not str.removeprefix: Python 3.9, and the importer runs on 3.8
    return f"{HOLD_REPOSITORY}:{digest[:12]}"


def undo_load_tags(engine: TagTable, before: Mapping[str, str], loaded: list[str]) -> list[str]:
    """Restore the tag table to ``before`` for every name the load touched; the names it had touched.

    A name counts as the load's only when it now names an image the load reported: the engine is
    shared, and a tag another client created or moved meanwhile (a build, another import) is not
    the load's to undo (seen: a concurrent test run's base tag removed by an import). Each loaded
    image is held under the importer's own name while foreign names are removed, and that name is
    removed again by ``release``.
    """
    ours = set(loaded)
    after = engine.tag_table()
    touched = sorted(
        name
        for name, image in after.items()
        if image in ours and before.get(name) != image and not name.startswith(HOLD_REPOSITORY)
    )
    if not touched:
        return []
    for image_id in loaded:
        engine.tag(image_id, hold_name(image_id))
    for name in touched:
        if name in before:
            engine.tag(before[name], name)  # moved by the load: back to the image it named
        else:
            engine.untag(name)  # created by the load
    return touched


def release(engine: TagTable, loaded: list[str]) -> None:
    """Drop the importer's own names once the image has the manifest's tags.

    Call it only then: removing an image's last name removes the image.
    """
    table = engine.tag_table()
    for image_id in loaded:
        if table.get(hold_name(image_id)) == image_id:
            engine.untag(hold_name(image_id))

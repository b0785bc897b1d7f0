"""The one way an integration changes a framework: a `Patch` replaces one attribute of a module or a class,
`install` applies a list of them and `uninstall` puts the originals back. Installing twice changes nothing:
every replacement carries the attribute it replaced under one marker (`ORIGINAL`), which no framework sets
(`__wrapped__` cannot serve: ms-swift's own decorators set it). Nothing here runs at import; each framework
module calls `install` from its documented entry point."""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

ORIGINAL = "_dara_original"
_INHERITED = object()  # the class did not define the attribute itself: uninstall deletes ours


@dataclass(frozen=True)
class Patch:
    """owner.name becomes make(original): a wrapper of the original, or a replacement that ignores it."""
    owner: Any
    name: str
    make: Callable[[Callable], Callable]


def is_patched(owner: Any, name: str) -> bool:
    return hasattr(getattr(owner, name, None), ORIGINAL)


def _apply(patch: Patch) -> None:
    if is_patched(patch.owner, patch.name):
        return
    original = getattr(patch.owner, patch.name)
    replacement = patch.make(original)

    # A fresh function per site, so that one replacement shared by several owners carries each owner's original.
    @functools.wraps(original)
    def patched(*args, **kwargs):
        return replacement(*args, **kwargs)

    setattr(patched, ORIGINAL, vars(patch.owner).get(patch.name, _INHERITED))
    setattr(patch.owner, patch.name, patched)


def _revert(patch: Patch) -> None:
    if not is_patched(patch.owner, patch.name):
        return
    original = getattr(getattr(patch.owner, patch.name), ORIGINAL)
    if original is _INHERITED:
        delattr(patch.owner, patch.name)
    else:
        setattr(patch.owner, patch.name, original)


def install(patches: Iterable[Patch]) -> None:
    for patch in patches:
        _apply(patch)


def uninstall(patches: Iterable[Patch]) -> None:
    for patch in reversed(list(patches)):
        _revert(patch)


@contextlib.contextmanager
def patched(patches: Iterable[Patch]) -> Iterator[None]:
    """The patches for the duration of a block (a framework call that must run differently this once)."""
    patches = list(patches)
    install(patches)
    try:
        yield
    finally:
        uninstall(patches)

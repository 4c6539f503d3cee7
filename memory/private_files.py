"""Files and folders of a memory that only their user may read: a memory holds what people said.

Under the usual umask 022 every file a library creates is readable by every local user (0644), and only the
0700 folder around it kept them out; a folder that existed before with a looser mode, or a file moved or
copied out of it, let them in. So the folders strata makes are 0700 with a default ACL where the file system
keeps one (Linux: what any library creates in them is private too), the files strata creates itself are made
0600 before a library opens them, and where no ACL applies (macOS), what Chroma wrote is made private after
(`make_private_tree`). A folder or a file that exists keeps its mode: the user may have set it.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path


def make_private_folder(folder: Path) -> None:
    """Create `folder` (and any missing parents) so that only this user can enter it (0700 whatever the
    umask), with a default ACL where the file system keeps one: what any library creates in it later
    (Chroma's index folders and files, SQLite's side files) is then private too. A folder that exists keeps
    its mode (one shared on purpose stays shared); the parents made on the way are ordinary folders."""
    if folder.is_dir():
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        if folder.is_dir():  # made meanwhile (another thread or process): whoever made it made it private
            return
        raise
    _private_by_default(folder)


_UNDEFINED_ID = 0xFFFFFFFF
# A POSIX ACL as Linux stores it in an extended attribute (version 2, then tag, permissions, id per entry):
# the owner rwx, the group and everyone else nothing. As a folder's default ACL, what is created in it gets
# the mode its maker asked for without the group's and others' bits (folders inherit the default too).
_OWNER_ONLY = struct.pack("<I", 2) + b"".join(
    struct.pack("<HHI", tag, permissions, _UNDEFINED_ID) for tag, permissions in ((0x01, 7), (0x04, 0), (0x20, 0))
)


def _private_by_default(folder: Path) -> None:
    """Give `folder` the default ACL `_OWNER_ONLY`, where the system and its file system keep one (not macOS,
    nor a file system mounted without ACLs: there the files a library makes are made private after it
    wrote them, `make_private_tree`)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setxattr(folder, "system.posix_acl_default", _OWNER_ONLY)  # type: ignore[attr-defined]


def keeps_private(folder: Path) -> bool:
    """Whether what is created in `folder` is made private by its default ACL (`make_private_folder`)."""
    try:
        return bool(os.getxattr(folder, "system.posix_acl_default") == _OWNER_ONLY)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return False


def make_private_tree(folder: Path) -> None:
    """Make a folder a library just created, and what is in it, this user's only (folders 0700, files 0600),
    where no default ACL did (`keeps_private`). Best effort: a file gone meanwhile is skipped."""
    for root, _, files in os.walk(folder):  # each folder is a root in turn
        for name, mode in ((root, 0o700), *((os.path.join(root, file), 0o600) for file in files)):
            try:
                os.chmod(name, mode)
            except OSError:
                continue


def make_private_file(path: Path) -> None:
    """Create `path`, empty and readable by this user only, unless it exists, before a library opens it with
    the umask's mode (SQLite made its databases 0644 under umask 022; their -wal, -shm and journal files
    take the database's mode). A file that exists keeps its mode (the user may have set it). Best effort: a
    folder that cannot take it is reported by the library's own open."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return
    os.close(descriptor)


def write_beside(target: Path, write: Callable[[Path], None], mode: int | None) -> None:
    """Have `write` fill a file beside `target`, then rename it over `target`: a failed write leaves an earlier
    file whole. The file is created afresh (never written through whatever holds its name), private (0600),
    and given `mode` before the rename when one is given (that of the file it replaces, which keeps its
    permissions). Raises the OSError of any step, after removing the partial file."""
    write_all_beside([(target, write, mode)])


def write_all_beside(files: Sequence[tuple[Path, Callable[[Path], None], int | None]]) -> None:
    """`write_beside` for files that belong together (a graph's JSON, GraphML and picture): every one is
    written beside its name first, and they are renamed over their names only when all were written, so one
    that fails leaves the earlier set whole instead of new files beside an old one."""
    partials: list[Path] = []
    try:
        for target, write, mode in files:
            partial = target.with_name(f".{target.name}.partial")
            partial.unlink(missing_ok=True)  # a stopped run's leftover
            os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            partials.append(partial)
            write(partial)
            if mode is not None:
                os.chmod(partial, mode)
        for (target, _, _), partial in zip(files, partials, strict=True):
            os.replace(partial, target)
    except BaseException:
        for partial in partials:
            with contextlib.suppress(OSError):  # on a read-only disk the cleanup fails as the write did
                partial.unlink(missing_ok=True)
        raise

"""Removing a folder that model code wrote into, without ever following a link it planted there.

Everything goes through descriptors: each folder is opened with `O_DIRECTORY | O_NOFOLLOW` relative to its
parent's descriptor, so a symlink (to `/`, to `/tmp`, to the data folder) is only ever unlinked, never entered
nor changed; a hard link is unlinked, which changes nothing but the link count of its target; a folder of
another filesystem (a mount point) is neither entered nor changed. The only mode ever changed is that of a
folder inside the tree that its owner cannot search or write (a model may leave one at mode 000), and it is
changed through the descriptor of that very folder (`/proc/self/fd/N` of an `O_PATH` descriptor, since
`fchmodat(..., AT_SYMLINK_NOFOLLOW)` is not implemented on Linux), never by name.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

OWNER_ALL = stat.S_IRWXU
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def remove_tree(path: Path | str) -> None:
    """Remove `path` and everything beneath it; a symlink at `path` itself is removed, not followed. Whatever
    cannot be removed (a mount point, a vanished entry) is left in place without an error."""
    path = Path(os.path.abspath(path))
    try:
        parent = os.open(path.parent, DIRECTORY_FLAGS)
    except OSError:
        return
    try:
        _remove_entry(parent, path.name, device=None)
    finally:
        os.close(parent)


def _remove_entry(parent: int, name: str, device: int | None) -> None:
    """Remove `name` in the folder `parent`: a file or link is unlinked, a folder of `device` emptied then removed."""
    folder = _open_folder(parent, name, device)
    if folder is None:
        try:
            os.unlink(name, dir_fd=parent)
        except OSError:
            pass
        return
    try:
        inside = os.fstat(folder).st_dev
        for entry in os.listdir(folder):
            _remove_entry(folder, entry, inside)
    except OSError:
        pass
    finally:
        os.close(folder)
    try:
        os.rmdir(name, dir_fd=parent)
    except OSError:
        pass


def _open_folder(parent: int, name: str, device: int | None) -> int | None:
    """A readable descriptor of the folder `name`, made searchable and writable by its owner when it was not; None
    when `name` is not a folder of `device` (a file, a link, a mount point) or cannot be opened."""
    try:
        folder: int | None = os.open(name, DIRECTORY_FLAGS, dir_fd=parent)
    except OSError as error:
        if error.errno != errno.EACCES:
            return None  # not a folder (ENOTDIR, ELOOP for a link), or gone
        folder = _unlock_and_open(parent, name, device)
    if folder is None:
        return None
    try:
        info = os.fstat(folder)
        if not stat.S_ISDIR(info.st_mode) or (device is not None and info.st_dev != device):
            os.close(folder)
            return None
        if info.st_mode & OWNER_ALL != OWNER_ALL:
            os.fchmod(folder, stat.S_IMODE(info.st_mode) | OWNER_ALL)
    except OSError:
        os.close(folder)
        return None
    return folder


def _unlock_and_open(parent: int, name: str, device: int | None) -> int | None:
    """A folder its owner cannot read (mode 000): give the owner its rights back through an `O_PATH` descriptor of
    that folder, then open it through the same descriptor."""
    try:
        handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISDIR(info.st_mode) or (device is not None and info.st_dev != device):
            return None
        through_handle = f"/proc/self/fd/{handle}"
        os.chmod(through_handle, stat.S_IMODE(info.st_mode) | OWNER_ALL)
        return os.open(through_handle, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    finally:
        os.close(handle)

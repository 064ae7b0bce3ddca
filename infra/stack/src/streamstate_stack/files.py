"""Writing a file so that a crash at any moment leaves the old file or the new one, never a
cut one: the project's one way to write a local file that is read back later.

A file written in place (``Path.write_text``, ``open(path, "w")``) is empty from the moment
it is opened until the write ends, and cut if the process dies in between (SIGKILL, the
machine's power, a full disk). A server's config cut that way fails its next start; a
credentials file cut that way is read as a short secret. :func:`write_atomic` writes a
temporary file in the same directory (created 0600, so a secret is never readable by
others, even for a moment), fsyncs it, renames it over the target (atomic within one file
system), then fsyncs the directory so that the rename itself survives a power loss.

Files that are appended to as they go (the logs) are not written this way: a log cut at
its end is still a log.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

# What Path.write_text gives under the usual umask 022: readable by all, written by the owner.
DEFAULT_MODE = 0o644


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new entry in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the rename is still atomic
    finally:
        os.close(fd)


def write_atomic(path: Path | str, data: str | bytes, *, mode: int = DEFAULT_MODE, exclusive: bool = False) -> bool:
    """Write ``data`` (text as UTF-8) to ``path`` with permissions ``mode``: a reader, or the
    process after a crash, sees the whole old file or the whole new one.

    ``exclusive``: only create ``path``, never replace it (the first of two concurrent
    writers wins, as ``O_EXCL`` would, but without ever showing a partial file); returns
    False when ``path`` already existed and was left as it was. Otherwise returns True.
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        if exclusive:
            try:
                os.link(temporary, path)  # fails if path exists: no replace, no race
            except FileExistsError:
                return False
            finally:
                os.unlink(temporary)
        else:
            os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    fsync_dir(path.parent)
    return True

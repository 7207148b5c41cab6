"""The one error of every visibility writer: a file that could not be created or written
(full disk, quota, EIO), with what the file still holds. The writer blocks catch this type
whichever format failed."""

from __future__ import annotations

import errno
from pathlib import Path


class OutputWriteError(OSError):
    """Writing a visibility file (UVH5, Measurement Set) failed (errno, filename); the file
    keeps every earlier dump."""

    def __init__(self, code: int, reason: str, filename: str, ndump: int | None) -> None:
        super().__init__(code, reason, filename)
        self.ndump = ndump  # dumps the file keeps; None: no dump was complete, no file left

    @classmethod
    def caused_by(cls, exc: BaseException, path: Path, ndump: int | None) -> OutputWriteError:
        """The error for ``path`` from the exception that stopped the write (its errno)."""
        return cls(getattr(exc, "errno", None) or errno.EIO,
                   getattr(exc, "strerror", None) or str(exc) or type(exc).__name__,
                   str(path), ndump)

    def __reduce__(self) -> tuple:
        return type(self), (self.errno, self.strerror, self.filename, self.ndump)

    @property
    def errno_symbol(self) -> str:
        """``ENOSPC``, ``EIO``...: the symbol of the errno."""
        return errno.errorcode.get(self.errno or 0, str(self.errno))

    def __str__(self) -> str:
        name = self.errno_symbol
        kept = ("no dump was complete, no file left" if self.ndump is None else
                f"the file keeps the {self.ndump} dumps written before")
        return (f"writing {self.filename} failed: [Errno {self.errno} {name}] {self.strerror}; "
                f"{kept}")

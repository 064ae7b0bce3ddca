"""Page cursors: the last user id of a page, hex-encoded so it is opaque and URL-safe.

Every string that matches :data:`CURSOR_PATTERN` decodes (bytes that are not UTF-8 map
to surrogates and simply sort somewhere), so a cursor that the schema allows is never
refused; only a malformed one is (400).
"""

from __future__ import annotations

import re

from streamstate_pipeline.errors import ApiError

_HEX_PAIRS_TEXT = r"(?:[0-9a-fA-F]{2})*"
CURSOR_PATTERN = f"^{_HEX_PAIRS_TEXT}$"  # the schema's; checked here as a whole-string match,
_HEX_PAIRS = re.compile(_HEX_PAIRS_TEXT)  # since "$" would also let a trailing newline through


class BadCursor(ApiError, ValueError):
    """A cursor that is not an even-length hex string."""


def encode_cursor(last_key: str) -> str:
    return last_key.encode("utf-8", "surrogateescape").hex()


def well_formed(cursor: str) -> bool:
    """Whether ``cursor`` matches :data:`CURSOR_PATTERN`."""
    return _HEX_PAIRS.fullmatch(cursor) is not None


def decode_cursor(cursor: str) -> str:
    """The key a page continues after, or :class:`BadCursor` with a one-line reason."""
    # Checked first: bytes.fromhex skips ASCII whitespace, so " \x0b" would decode to no key.
    if not well_formed(cursor):
        raise BadCursor(f"cursor {cursor[:40]!r} is not valid: pass the next_cursor of the previous page unchanged")
    return bytes.fromhex(cursor).decode("utf-8", "surrogateescape")

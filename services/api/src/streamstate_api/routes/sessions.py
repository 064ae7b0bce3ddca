"""``/sessions``: a user's open session and lifetime behaviour, and the listing in user-id order.

The answers are built by :func:`session_body` and :func:`page_body`, which the fast path
(:mod:`streamstate_api.fastpath`) calls too: one implementation, two ways in.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.responses import Response

from streamstate_api.context import ApiContext
from streamstate_api.cursor import CURSOR_PATTERN, BadCursor, decode_cursor, encode_cursor
from streamstate_api.deps import ContextDep
from streamstate_api.models import NOT_FOUND, Problem, SessionPage, SessionResponse
from streamstate_api.record_contracts import Source

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100

router = APIRouter(tags=["sessions"])


def session_body(api: ApiContext, user_id: str) -> bytes | None:
    """The answer for one user, or None when the view has no such user."""
    record, positions = api.view.session(user_id)
    if record is None:
        return None
    active = b"true" if record.active else b"false"
    return api.responder.body(Source.SESSIONS, positions, b'"session":' + record.body, b'"active":' + active)


def page_body(api: ApiContext, after: str | None, limit: int, active: bool) -> bytes:
    """One page of the listing: the ``limit`` users after the user id ``after``."""
    page, positions = api.view.sessions(after, limit, active)
    next_cursor = json.dumps(encode_cursor(page.last_key) if page.last_key is not None else None).encode()
    items = b'"items":' + api.responder.array(page.items)
    return api.responder.body(Source.SESSIONS, positions, items, b'"next_cursor":' + next_cursor)


@router.get(
    "/sessions/{user_id:path}",
    response_model=SessionResponse,
    summary="A user's open session and lifetime behaviour.",
    responses=NOT_FOUND,
)
async def get_session(user_id: Annotated[str, Path(description="The user id.")], api: ContextDep) -> Response:
    body = session_body(api, user_id)
    if body is None:
        raise HTTPException(404, f"no session state for user {user_id!r}")
    return api.responder.json(body)


@router.get(
    "/sessions",
    response_model=SessionPage,
    summary="Sessions in user-id order, a page at a time.",
    responses={400: {"model": Problem, "description": "Malformed cursor."}},
)
async def list_sessions(
    api: ContextDep,
    active: Annotated[bool, Query(description="Only users with an open session.")] = False,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Page size.")] = DEFAULT_LIMIT,
    cursor: Annotated[
        str | None,
        Query(
            description="The next_cursor of the previous page. Pages continue after a user id, so inserts "
            "and removals between requests never make a later page skip or repeat a user.",
            json_schema_extra={"pattern": CURSOR_PATTERN},
        ),
    ] = None,
) -> Response:
    try:
        after = decode_cursor(cursor) if cursor else None
    except BadCursor as exc:
        raise HTTPException(400, str(exc)) from None
    return api.responder.json(page_body(api, after, limit, active))

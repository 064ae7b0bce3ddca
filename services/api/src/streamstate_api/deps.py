"""The routes' dependencies, as ``Annotated`` types (the FastAPI full-stack template's
``deps.py``): the shared :class:`~streamstate_api.context.ApiContext`, and the bearer-token
check that the data routers get when ``api_token`` is set.

Dependencies are ``async def``: a plain ``def`` dependency would run in the thread pool,
a thread hop per request that costs more than the lookup it guards.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from streamstate_api.context import ApiContext


async def get_context(request: Request) -> ApiContext:
    return request.app.state.context


ContextDep = Annotated[ApiContext, Depends(get_context)]

bearer = HTTPBearer(auto_error=False, description="The API's token (STREAMSTATE_API_TOKEN), when one is set.")


async def require_token(
    context: ContextDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> None:
    """401 unless the request carries ``Authorization: Bearer <api_token>``."""
    expected = context.token
    if expected is None:
        return
    if credentials is None:
        raise HTTPException(
            401,
            "this endpoint requires a bearer token: send the header 'Authorization: Bearer <token>' "
            "with the API's token (STREAMSTATE_API_TOKEN)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise HTTPException(401, "the bearer token is not valid", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


TokenDep = Depends(require_token)

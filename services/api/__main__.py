"""``python -m streamstate.api``: serve the snapshot API on ``api_host:api_port``."""

from __future__ import annotations

import logging

import uvicorn

from streamstate.api.app import create_app
from streamstate.settings import Settings


def main() -> None:
    """Run the API under uvicorn until SIGINT/SIGTERM (uvicorn stops the follower via the lifespan)."""
    settings = Settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # No access log: at a thousand requests a second it would cost more than the requests; /metrics counts them.
    uvicorn.run(create_app(settings), host=settings.api_host, port=settings.api_port, access_log=False, log_level="info")


if __name__ == "__main__":
    main()

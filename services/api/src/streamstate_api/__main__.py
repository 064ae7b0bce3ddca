"""``streamstate-api`` / ``python -m streamstate_api``: serve the snapshot API.

    streamstate-api [--host HOST] [--port PORT] [--bootstrap-servers SERVERS] [-X KEY=VALUE] [--version]

Flags as uvicorn's (``--host``, ``--port``) and as the project's other commands
(``--bootstrap-servers``, ``-X``, ``--version``: :mod:`streamstate_pipeline.cli_common`); each
overrides its setting (``STREAMSTATE_API_HOST``, ...).

Server stack, chosen by measurement (docs/api-store.md, "Serving"): one uvicorn process
with the uvloop event loop and the httptools HTTP parser. Responses are stored bytes
spliced together (no JSON library on the hot path), so what is left per request is the
server's and FastAPI's own work; a second worker process would need a second copy of the
view or a shared store between processes, and on two cores it would compete with the
follower and with the clients for the same CPU.
"""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from streamstate_pipeline.cli_common import add_common_options, setting_error, settings_from_args
from streamstate_pipeline.errors import ConfigurationError
from streamstate_pipeline.settings import Settings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="streamstate-api",
        description="Serve the snapshot API (sessions, series, alerts) from a local view of the state topics.",
    )
    parser.add_argument("--host", help="Bind socket to this host (default: STREAMSTATE_API_HOST, 127.0.0.1).")
    parser.add_argument("--port", type=int, help="Bind socket to this port (default: STREAMSTATE_API_PORT, 8000).")
    add_common_options(parser)
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    return settings_from_args(args, api_host=args.host, api_port=args.port)


def main(argv: list[str] | None = None) -> None:
    """Run the API until SIGINT/SIGTERM (the lifespan stops the follower and closes the store)."""
    try:
        settings = settings_from(parse_args(argv))
    except ValueError as exc:
        print(f"streamstate-api: error: {setting_error(exc)}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from streamstate_api.app import create_app
    from streamstate_api.store import StoreUnavailable
    from streamstate_api.timeouts import request_head_protocol

    try:
        app = create_app(settings)
    except ConfigurationError as exc:
        print(f"streamstate-api: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except StoreUnavailable as exc:
        sys.exit(f"streamstate-api: {exc}")
    # No access log: at thousands of requests a second it would cost more than the requests; /metrics counts them.
    uvicorn.run(
        app, host=settings.api_host, port=settings.api_port, loop="uvloop",
        http=request_head_protocol(settings.api_request_head_timeout_s, settings.api_max_request_head_bytes),
        limit_concurrency=settings.api_max_connections, access_log=False, log_level="info",
    )


if __name__ == "__main__":
    main()

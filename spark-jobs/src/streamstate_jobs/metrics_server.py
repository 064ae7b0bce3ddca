"""The jobs' /metrics HTTP server: prometheus_client's WSGI app, with a read timeout and a cap
on the connections served at once.

prometheus_client's ``start_http_server`` serves each connection in a thread of its own and
never times a read out, so a connection that sends nothing holds its thread for ever: 500
idle sockets left 502 threads in a job's driver after 30 s (issue 51). Here a connection
whose next bytes do not come within the read timeout is closed, and a connection past the
cap is answered 503 at once and closed, as the API's server does: whatever clients do, the
server holds at most ``max_connections`` threads. A Prometheus scrape (one request, sent as soon as the
connection opens, answered in milliseconds) never comes near either limit.

The timeout is per read, not per connection: a client trickling a byte per period holds its
thread longer, and the cap still bounds how many do.
"""

from __future__ import annotations

import logging
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 5.0  # a scrape sends its request at once; an idle connection goes after this
MAX_CONNECTIONS = 16  # Prometheus, a person with curl and a dashboard's probe, with room to spare
BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 35\r\n"
    b"Connection: close\r\n\r\ntoo many connections: try again later"
)


class _Handler(WSGIRequestHandler):
    """One connection: reads time out after the server's read timeout; nothing is logged."""

    server: MetricsServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.read_timeout_s)  # every read and write of the connection

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:  # the read timed out, or the client went away: the connection ends here
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most ``max_connections`` of them; see the module docstring."""

    daemon_threads = True  # a job's server ends with its process
    request_queue_size = 64  # accepted quickly, then served or closed: a burst is not refused by the kernel

    def __init__(self, host: str, port: int, read_timeout_s: float, max_connections: int):
        self.read_timeout_s = read_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        super().__init__((host, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except BaseException:
            self._slots.release()
            raise

    def _refuse(self, request: socket.socket) -> None:
        """Past the cap: 503 and close, from the accepting thread (a new connection's send
        buffer is empty, so the short answer never blocks it), with no thread of its own."""
        try:
            request.setblocking(False)
            request.send(BUSY)
        except OSError:
            pass  # the client left already
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics connection from %s failed", client_address, exc_info=True)


def serve_metrics(
    registry: CollectorRegistry, host: str, port: int, read_timeout_s: float = READ_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
) -> MetricsServer:
    """Serve ``registry`` on ``host:port`` from a daemon thread; ``shutdown()`` and
    ``server_close()`` stop it."""
    server = MetricsServer(host, port, read_timeout_s, max_connections)
    server.set_app(make_wsgi_app(registry))
    threading.Thread(target=server.serve_forever, name=f"metrics-server-{port}", daemon=True).start()
    return server

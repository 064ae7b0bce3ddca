"""A TCP proxy in front of the test broker that reads the client id of every Kafka request.

Each Kafka request starts with its size (int32), API key, version (int16 each), correlation
id (int32) and the client id (int16 length, then bytes). The proxy forwards every byte both
ways unchanged and records those client ids, so a test can see which settings a client
really sent to the broker, not just what a config dictionary says.
"""

from __future__ import annotations

import socket
import struct
import threading

from streamstate_stack.launcher import free_port


class ClientIdProxy:
    """Listens on 127.0.0.1:<port> and forwards to ``upstream`` (host:port); see the module docstring."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.client_ids: list[str] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._server.settimeout(0.2)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def seen(self) -> set[str]:
        with self._lock:
            return set(self.client_ids)

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(5)
        self._server.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                continue
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _requests(self, source: socket.socket, target: socket.socket) -> None:
        buffer = b""
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
                buffer += chunk
                while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">i", buffer[:4])[0]:
                    size = struct.unpack(">i", buffer[:4])[0]
                    request, buffer = buffer[4 : 4 + size], buffer[4 + size :]
                    (length,) = struct.unpack(">h", request[8:10])
                    if length >= 0:
                        with self._lock:
                            self.client_ids.append(request[10 : 10 + length].decode("utf-8", "replace"))
        except OSError:
            pass
        finally:
            _close(source, target)

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(source, target)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

"""A fork server for the one-off Python processes a Spark driver starts (:mod:`streamstate.launcher`).

Spark forks its task workers from a daemon, which the launcher preloads. Some Python processes
it starts as new interpreters every time (``PythonWorkerFactory.createSimpleWorker``):
transformWithState's pre-init process, for every operator at every query start, and on Spark
Connect the server's foreachBatch process of every query. Each imports PySpark again: 0.26-0.49
s of a query's start per operator, a third of a test made of short queries (docs/profile.md).

With ``STREAMSTATE_FORK_SERVER=on`` in their environment (``spark.executorEnv.*``, as the test
sessions set it) the launcher hands such a process to a server: a process of the same
interpreter and path that imported those modules once and forks a child per request. The child
takes the launcher's standard streams (passed over a Unix socket), environment, working
directory and arguments, and runs the module as the launcher would have; the launcher waits and
exits with the child's status, forwarding the signals it gets, so the JVM's process behaves as
before. A launcher that is killed (the JVM destroys a worker it is done with) takes its child
along: the server kills a child whose launcher's connection closed.

A server serves one JVM, the launcher's parent, and exits when that JVM does. A JVM's first
request starts it and runs its module itself meanwhile.

A driver process that has already imported what Spark's Python processes import can fork its
own server before it starts its JVM (:func:`fork_for_children`): that server serves every JVM
the process starts, PySpark's daemon included, and exits with the process. The JVM's daemon
and pre-init processes are then forks with everything imported, instead of interpreters that
import PySpark, pyarrow and the application's modules again on the first batch's path (about a
CPU-second of a long-running driver's start). A child of that server hashes strings as the
process does, so the server forks only for a launcher whose ``PYTHONHASHSEED`` is the
process's own (Spark gives its workers ``0``); any other runs its module itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import struct
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from streamstate.spark_python import DAEMON, as_python_m, drop_archives, preload, preloaded_modules, prepare_daemon, run_as_main

if TYPE_CHECKING:
    import selectors

VARIABLE = "STREAMSTATE_FORK_SERVER"
# Set by fork_for_children: the address of the calling process's own server.
SOCKET_VARIABLE = "STREAMSTATE_FORK_SERVER_SOCKET"
# The modules Spark starts as new interpreters that a fork serves: transformWithState's
# pre-init process and Spark Connect's foreachBatch process.
FORKED_MODULES = (
    "pyspark.sql.streaming.transform_with_state_driver_worker",
    "pyspark.sql.connect.streaming.worker.foreach_batch_worker",
)
# Bound by a server from its start until it serves: launchers meanwhile start no other.
STARTING = b"/starting"
_INT = struct.Struct("!i")
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def enabled(module: str, environ: Mapping[str, str]) -> bool:
    """Whether the launcher hands ``module`` to its JVM's fork server (Linux: abstract sockets, pidfds)."""
    return environ.get(VARIABLE, "").lower() == "on" and module in FORKED_MODULES and hasattr(os, "pidfd_open")


def process_server(module: str, environ: Mapping[str, str]) -> bytes | None:
    """The address of the server a process forked for its JVMs (:func:`fork_for_children`)
    when it serves ``module``: PySpark's daemon and the one-off processes."""
    where = environ.get(SOCKET_VARIABLE)
    if not where or (module != DAEMON and module not in FORKED_MODULES):
        return None
    return b"\0" + where.encode()


def _start_ticks(pid: int) -> str:
    """When ``pid`` started (its 22nd stat field): with the PID, a process no later one is taken for."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[19].decode()


def address(jvm_pid: int, environ: Mapping[str, str]) -> bytes:
    """The server's abstract Unix socket for this user, JVM, interpreter and Python path."""
    python = hashlib.sha256(f"{sys.executable}\n{environ.get('PYTHONPATH', '')}".encode()).hexdigest()[:16]
    return f"\0streamstate-fork-server/{os.getuid()}/{jvm_pid}-{_start_ticks(jvm_pid)}/{python}".encode()


def _read_int(connection: socket.socket) -> int | None:
    data = b""
    while len(data) < _INT.size:
        chunk = connection.recv(_INT.size - len(data))
        if not chunk:
            return None
        data += chunk
    return _INT.unpack(data)[0]


# ---------------------------------------------------------------------------------- launcher side


def delegate(arguments: list[str]) -> int | None:
    """Run ``python -m`` ``arguments`` (module first) in a child of this JVM's server and return
    its exit status; None when no server answered (one is started: the caller runs the module)."""
    jvm = os.getppid()
    try:
        where = address(jvm, os.environ)
    except OSError:  # no /proc entry for the parent: nothing to serve
        return None
    connection = _connected(where)
    if connection is None:
        if not _connected_and_closed(where + STARTING):  # none starting either (it imports for a second or so)
            _start_server(jvm)
        return None
    return _forked(connection, arguments)


def delegate_to(where: bytes, arguments: list[str]) -> int | None:
    """:func:`delegate` to the server at ``where``; None when it does not answer or refuses."""
    connection = _connected(where)
    return None if connection is None else _forked(connection, arguments)


def _forked(connection: socket.socket, arguments: list[str]) -> int | None:
    with connection:
        request = json.dumps({"argv": arguments, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(connection, [_INT.pack(len(request)) + request], [0, 1, 2])
        child = _read_int(connection)
        if child is None:  # the server went, or refused, before it forked
            return None
        for signum in _FORWARDED:
            signal.signal(signum, lambda received, _frame: os.kill(child, received))
        status = _read_int(connection)
    if status is None:  # the server went: the child with it
        return 1
    return status if status >= 0 else 128 - status


def _connected(where: bytes) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(where)
    except OSError:
        connection.close()
        return None
    return connection


def _connected_and_closed(where: bytes) -> bool:
    connection = _connected(where)
    if connection is not None:
        connection.close()
    return connection is not None


def _start_server(jvm: int) -> None:
    import subprocess  # here: the launcher imports this module at every start

    with contextlib.suppress(OSError):
        subprocess.Popen(  # noqa: S603 - this interpreter, this module
            [sys.executable, "-m", __name__, str(jvm)], env=os.environ, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )


# ---------------------------------------------------------------------------------- server side


def _receive_request(connection: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    while len(data) < _INT.size or len(data) < _INT.size + _INT.unpack(data[:_INT.size])[0]:
        chunk = connection.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the request ended early")
        data += chunk
    return json.loads(data[_INT.size:]), fds


def _run_child(request: dict, fds: list[int], inherited: Iterable[int]) -> None:
    """In the forked child: become the process the launcher would have been, run the module, exit."""
    code = 1
    try:
        for fd in inherited:
            with contextlib.suppress(OSError):
                os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in any new interpreter
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        if "logging" in sys.modules:  # a new interpreter's: the forking process may have configured its own
            import logging

            logging.root.handlers.clear()
            logging.root.setLevel(logging.WARNING)
        os.chdir(request["cwd"])
        as_python_m(request["argv"], request["cwd"])
        if sys.argv[0] == DAEMON:
            prepare_daemon()
        # runpy runs the module's code anew; preloaded, it would warn of its copy in sys.modules.
        sys.modules.pop(sys.argv[0], None)
        try:
            run_as_main(sys.argv[0])
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported on the launcher's standard error, as python -m would
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(jvm: int) -> None:
    """Import what the one-off processes import, then fork one per request until ``jvm`` exits."""
    starting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        where = address(jvm, os.environ)
        starting.bind(where + STARTING)
    except OSError:  # the JVM is gone, or another server of it is starting
        return
    starting.listen(1)
    drop_archives()
    _preload(FORKED_MODULES)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        jvm_exit = os.pidfd_open(jvm)
        listener.bind(where)
    except OSError:  # the JVM is gone, or another server of it serves
        return
    listener.listen(64)
    starting.close()
    _serve(listener, jvm_exit)


def fork_for_children(preload: Iterable[str] = ()) -> bool:
    """Fork this process's own server, for the JVMs it starts from now on (their launchers find
    it through :data:`SOCKET_VARIABLE`): call it before this process starts any thread of its
    own. The server imports ``preload`` and what Spark's Python processes import, beside this
    process, and exits with it. False where there are no pidfds (nothing forked)."""
    if not hasattr(os, "pidfd_open"):
        return False
    parent = os.getpid()
    name = f"streamstate-fork-server/{os.getuid()}/{parent}-{_start_ticks(parent)}/process"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    parent_exit = None
    try:
        listener.bind(b"\0" + name.encode())
        listener.listen(64)  # bound before the fork: a launcher finds it even while it imports
        parent_exit = os.pidfd_open(parent)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        forked = os.fork()
    except OSError:  # no server: every launcher runs its module itself
        listener.close()
        if parent_exit is not None:
            os.close(parent_exit)
        return False
    if forked == 0:
        code = 0
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the process's to handle
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _preload([DAEMON, *FORKED_MODULES, *preload])
            _serve(listener, parent_exit)
        except BaseException:  # noqa: BLE001 - reported in the process's log; its launchers then run their modules themselves
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    listener.close()
    os.close(parent_exit)
    os.environ[SOCKET_VARIABLE] = name
    return True


def _preload(modules: Iterable[str]) -> None:
    """Import ``modules`` and what PySpark's daemon preloads for its workers (streamstate.spark_python)."""
    for failure in preload([*modules, *preloaded_modules(os.environ)]):
        print(failure, file=sys.stderr, flush=True)


def _own_hash_seed() -> str | None:
    """``PYTHONHASHSEED`` as this interpreter hashes: ``"0"``, or None (random) for any other."""
    return None if sys.flags.hash_randomization else "0"


def _serve(listener: socket.socket, exit_fd: int) -> None:
    """Fork a child per request on ``listener`` until the process of ``exit_fd`` (a pidfd) exits.
    A request whose ``PYTHONHASHSEED`` is not this interpreter's is refused: its child would hash
    strings as this server does, not as the launcher's environment says."""
    import gc
    import selectors

    hash_seed = _own_hash_seed()

    gc.freeze()  # the imports' heap: shared with every child, out of their collections
    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.EpollSelector()
    selector.register(listener, selectors.EVENT_READ, "request")
    selector.register(exit_fd, selectors.EVENT_READ, "exit")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    children: dict[int, socket.socket] = {}  # a running child -> its launcher's connection
    while True:
        for key, _ in selector.select():
            if key.data == "exit":
                for child in children:
                    _kill(child)
                return
            if key.data == "child":
                with contextlib.suppress(OSError):
                    while os.read(wake_read, 512):
                        pass
                _reap(children, selector)
            elif key.data == "request":
                connection, _ = listener.accept()
                try:
                    request, fds = _receive_request(connection)
                except (OSError, ValueError):
                    connection.close()
                    continue
                if request["env"].get("PYTHONHASHSEED") != hash_seed:
                    for fd in fds:
                        os.close(fd)
                    connection.close()  # the launcher runs its module itself
                    continue
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                inherited = [selector.fileno(), listener.fileno(), exit_fd, wake_read, wake_write, connection.fileno(),
                             *(c.fileno() for c in children.values())]
                child = os.fork()
                if child == 0:
                    _run_child(request, fds, inherited)
                for fd in fds:
                    os.close(fd)
                children[child] = connection
                selector.register(connection, selectors.EVENT_READ, child)
                with contextlib.suppress(OSError):
                    connection.sendall(_INT.pack(child))
            elif key.data in children:  # its launcher's connection: readable only once it closed
                _kill(key.data)
                selector.unregister(key.fileobj)


def _kill(child: int) -> None:
    """SIGKILL a child, and the process group it leads if it made one (PySpark's daemon does,
    for its workers)."""
    with contextlib.suppress(OSError):
        if os.getpgid(child) == child:
            os.killpg(child, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(child, signal.SIGKILL)


def _reap(children: dict[int, socket.socket], selector: "selectors.BaseSelector") -> None:
    while children:
        try:
            child, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if child == 0:
            return
        connection = children.pop(child, None)
        if connection is None:
            continue
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(connection)
        with contextlib.suppress(OSError):
            connection.sendall(_INT.pack(os.waitstatus_to_exitcode(status)))
        connection.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]))

"""The API's view on disk: a local RocksDB store (through rocksdict) that holds the latest
snapshot per user and per series, the kept alerts and the consumed offsets, so memory stays
bounded whatever the number of users and a restart resumes from the stored offsets.

Why RocksDB (``bench/api_store.py``, recorded in docs/api-store.md): on the view's own access
pattern (1,000,000 snapshots) LMDB loaded 509,000/s and read a key in 3.5 µs, but it reads
through a memory map, so every page a request touches stays in the process's RSS (738 MB
after random reads, growing with the users: ~7 GB at ten million); SQLite kept RSS low
(141 MB) but loaded 82,500/s, under half the rebuild rate the API needs. RocksDB loaded
170,000/s with a read of every key's header per batch, read a key in 14 µs, and kept RSS at
the block cache plus memtables (210 MB, independent of the users).

Layout (one column family; keys are a one-byte kind plus the UTF-8 id, so a prefix scan is
an ordered walk by id, which is what cursor paging needs):

=========  ====================================================================
``s`` id   session: 8-byte event time ``ts``, 1 flag byte (1 = open session), then
           the snapshot's JSON exactly as validated (served without re-parsing)
``a`` id   empty: the user has an open session (the ``active=true`` listing)
``m`` id   series: ``ts``, a flag byte (1 = last z present), the z (double), JSON
``g`` id   a deleted session's last event time, and the wall-clock time (ms) of its deletion
           (:data:`GRAVE`; a store written before has only the first: see :mod:`streamstate_api.view`)
``h`` id   the same for a deleted series
``A`` id   a kept alert's JSON
``~o`` ..  consumed offset per source and partition
``~n`` ..  counters (sessions, active sessions, series)
``~v``     format version and the identity of the topics the store was built from
=========  ====================================================================

Every batch of consumed records is one :class:`WriteBatch` with the new values *and* the
offsets after them: RocksDB applies it atomically and logs it to its write-ahead log before
returning, so a process killed at any moment reopens with values and offsets that agree.
A cold rebuild writes without the log (``logged=False``: the log cost it about a twentieth of
its time at 1,000,000 snapshots, a tenth or more at 10,000,000): a kill then loses what no
table file holds yet, and the store reopens as it was at its last flush, values and offsets
still in agreement, since RocksDB flushes whole memtables in the order they were written.
Before the first logged write after unlogged ones the store flushes: RocksDB replays its log
over the table files, and a logged write replayed without the unlogged ones before it would
leave a store that is no earlier state of itself. The view says how far a rebuild is only up to its last flush
(:meth:`StateView.kept_positions`), so progress it has reported survives a kill.
A store that cannot be opened, has another format or was built from other topics is moved
aside and rebuilt from the topics (:func:`open_store` says why).

Damage found later (a flipped bit in a data file, a cut file) is found where it is read:
RocksDB checks every block's checksum on every read, so a damaged block never yields a value,
and a scan that stops on one reports it through the iterator's status (checked, so a listing
never ends early as if complete). Any such error marks the store damaged
(:class:`StoreDamaged`): requests get a 503 saying so, and the follower rebuilds the store
from the topics (:func:`replace_damaged`), which ``/readyz`` shows with the reason.
"""

from __future__ import annotations

import json
import logging
import shutil
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Env, Options, Rdict, WriteBatch, WriteOptions

from streamstate_pipeline.errors import ApiError

log = logging.getLogger("streamstate_api.store")

FORMAT = 1
SESSION, ACTIVE, SERIES = b"s", b"a", b"m"
SESSION_GRAVE, SERIES_GRAVE = b"g", b"h"
ALERT = b"A"
_OFFSET, _COUNTER, _IDENTITY = b"~o", b"~n", b"~v"

TS = struct.Struct(">q")
# What the store's event-time field holds: a record outside it cannot be stored, so the API's
# strict check refuses it (a bad record) instead of letting it fail its batch's write.
TS_MIN, TS_MAX = -(2**63), 2**63 - 1
GRAVE = struct.Struct(">qq")  # the deleted snapshot's ts, the wall-clock ms the deletion was applied
SESSION_HEAD = struct.Struct(">qB")  # ts, open-session flag
SERIES_HEAD = struct.Struct(">qBd")  # ts, has-z flag, z
_PARTITION = struct.Struct(">I")
COUNTERS = ("sessions", "active_sessions", "series", "graves")


def key_bytes(key: str) -> bytes:
    # surrogateescape: a cursor may carry any bytes; they sort where their bytes sort.
    return key.encode("utf-8", "surrogateescape")


def key_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _offset_key(source: str, partition: int) -> bytes:
    return _OFFSET + source.encode() + b"\x00" + _PARTITION.pack(partition)


class StoreDamaged(ApiError, RuntimeError):
    """RocksDB reported corruption or an I/O error on this store: nothing it answers can be trusted
    until it is rebuilt from the topics."""


class StoreUnavailable(ApiError, RuntimeError):
    """The store can be neither used nor rebuilt here: another process holds it (a second API on
    the same ``api_store_path``), or its directory cannot be written."""


@dataclass(frozen=True)
class Opened:
    """A store ready to use, and why it starts empty (None when it was reopened intact)."""

    store: "ViewStore"
    rebuild_reason: str | None


class ViewStore:
    """Thin typed access to the RocksDB store; the rules of what to write live in the view."""

    def __init__(self, path: Path, cache_mb: int):
        self.path = path
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_paranoid_checks(True)
        table = BlockBasedOptions()
        # The block cache bounds what reads keep in memory; the OS page cache (not the
        # process's RSS) holds the rest of the files.
        table.set_block_cache(Cache(cache_mb << 20))
        table.set_bloom_filter(10, False)
        options.set_block_based_table_factory(table)
        options.set_compression_type(DBCompressionType.lz4())
        options.set_max_background_jobs(2)
        # Flushes and compactions run at the lowest CPU priority: on two cores they took CPU from
        # the serving loop right after a rebuild, when the compactions it left behind still run
        # (p99 160 ms at 5,000 requests/s in the first seconds, 3.5 ms once they were done; issue 54).
        # Nothing else waits for them: with idle CPU they run as fast as before.
        env = Env()  # RocksDB's default environment, whose thread pools every store shares
        env.lower_thread_pool_cpu_priority()
        env.lower_high_priority_thread_pool_cpu_priority()
        options.set_env(env)
        options.set_keep_log_file_num(2)
        self.db = Rdict(str(path), options)
        # A logged write reaches the OS on every write (a SIGKILL loses nothing of it);
        # no fsync per batch: after a power loss the store is rebuilt or resumed earlier.
        self._write_options = WriteOptions()
        self._write_options.sync = False
        self._unlogged_options = WriteOptions()
        self._unlogged_options.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; the 0.3.29 stub says a method
        self._unlogged = False  # written without the log since the last flush
        self._flushing: threading.Thread | None = None
        self.cache_mb = cache_mb
        self.closed = False
        self.damage: str | None = None  # why the store cannot be trusted, once a read or write failed

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        """RocksDB reports corruption and I/O errors as plain exceptions: each marks the store damaged."""
        try:
            yield
        except StoreDamaged:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. "Corruption: block checksum mismatch"
            raise self._damaged(exc) from None

    def _damaged(self, error: Exception) -> StoreDamaged:
        if self.damage is None:
            self.damage = " ".join(str(error).split())[:300]
            log.error("view store %s is damaged: %s; it will be rebuilt from the topics", self.path, self.damage)
        return StoreDamaged(
            f"the API's view store is damaged ({self.damage}) and is being rebuilt from the topics; "
            "retry when /readyz answers 200"
        )

    # ------------------------------------------------------------------ meta
    def identity(self) -> dict | None:
        raw = self.get(_IDENTITY)
        with self._guarded():
            return json.loads(raw) if raw is not None else None

    def set_identity(self, identity: dict) -> None:
        batch = WriteBatch(raw_mode=True)
        batch.put(_IDENTITY, json.dumps(identity, sort_keys=True).encode())
        self._write(batch)

    def offsets(self) -> dict[tuple[str, int], int]:
        """Stored next offset per (source, partition)."""
        found = {}
        for key, value in self.scan(_OFFSET):
            source, _, partition = key[len(_OFFSET):].partition(b"\x00")
            found[(source.decode(), _PARTITION.unpack(partition)[0])] = TS.unpack(value)[0]
        return found

    def counters(self) -> dict[str, int]:
        values = self.get_many([_COUNTER + name.encode() for name in COUNTERS])
        return {name: TS.unpack(v)[0] if v is not None else 0 for name, v in zip(COUNTERS, values)}

    # ------------------------------------------------------------------ writing
    def write(
        self, puts: dict[bytes, bytes | None], offsets: dict[tuple[str, int], int], counters: dict[str, int], logged: bool = True
    ) -> None:
        """One atomic write: values (None deletes), offsets and counters together; without the
        write-ahead log when not ``logged`` (see the module docstring)."""
        batch = WriteBatch(raw_mode=True)
        put, delete = batch.put, batch.delete  # once per value of a rebuild
        for key, value in puts.items():
            if value is None:
                delete(key)
            else:
                put(key, value)
        for (source, partition), offset in offsets.items():
            batch.put(_offset_key(source, partition), TS.pack(offset))
        for name, count in counters.items():
            batch.put(_COUNTER + name.encode(), TS.pack(count))
        self._write(batch, logged)

    def _write(self, batch: WriteBatch, logged: bool = True) -> None:
        if logged:
            self.persist()  # the unlogged writes reach the tables before a logged one follows them
        with self._guarded():
            self.db.write(batch, self._write_options if logged else self._unlogged_options)
        self._unlogged = self._unlogged or not logged

    @property
    def unlogged(self) -> bool:
        """Whether writes made without the log since the last :meth:`persist` may not be in the
        table files yet (a kill would lose them)."""
        return self._unlogged

    def flush(self) -> None:
        """Every write so far into the table files, where a kill cannot lose it. From any
        thread (RocksDB's flush runs without the GIL, and writes go on meanwhile), so it leaves
        :attr:`unlogged` as it is: writes may have followed it."""
        with self._guarded():
            self.db.flush(True)

    def flush_in_background(self, then: Callable[[], None]) -> bool:
        """:meth:`flush` on a thread of its own, then ``then()``; False (nothing started) while
        the last one runs. :meth:`close` and :meth:`persist` wait for it."""
        if self._flushing is not None and self._flushing.is_alive():
            return False

        def flush() -> None:
            try:
                self.flush()
            except StoreDamaged:
                return  # marked damaged: the follower replaces the store
            then()

        self._flushing = threading.Thread(target=flush, name="view-store-flush", daemon=True)
        self._flushing.start()
        return True

    def _wait_for_flush(self) -> None:
        if self._flushing is not None:
            self._flushing.join()
            self._flushing = None

    def persist(self) -> None:
        """:meth:`flush`, by the writer between its writes: nothing unlogged is left after it."""
        self._wait_for_flush()
        if self._unlogged:
            self.flush()
            self._unlogged = False

    # ------------------------------------------------------------------ reading
    def get(self, key: bytes) -> bytes | None:
        with self._guarded():
            return self.db.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        with self._guarded():
            return cast("list[bytes | None]", self.db.get(cast(list, keys))) if keys else []

    def scan(self, prefix: bytes, after: bytes | None = None):
        """(key, value) of every key with ``prefix`` in key order, strictly after ``prefix + after``;
        :class:`StoreDamaged` when a damaged block ends the walk (never a silently short one)."""
        with self._guarded():
            iterator = self.db.iter()
            iterator.seek(prefix + (after + b"\x00" if after is not None else b""))
        while iterator.valid():
            key = iterator.key()
            if not key.startswith(prefix):
                return
            yield key, iterator.value()
            iterator.next()
        with self._guarded():
            iterator.status()  # an iterator stopped by an error is merely "not valid": ask why

    def clear(self, identity: dict | None = None) -> None:
        """Delete every value, offset and counter in one atomic write, which also records
        ``identity`` when given (else the identity stays)."""
        batch = WriteBatch(raw_mode=True)
        batch.delete_range(b"", _IDENTITY)
        batch.delete_range(_IDENTITY + b"\x00", b"\xff")
        if identity is not None:
            batch.put(_IDENTITY, json.dumps(identity, sort_keys=True).encode())
        self._write(batch)
        with self._guarded():
            self.db.compact_range(None, None)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._wait_for_flush()  # RocksDB refuses to close a store while it flushes
            if self._unlogged and self.damage is None:
                try:
                    self.db.flush(True)  # a stop keeps what a rebuild wrote without the log
                except Exception as exc:  # noqa: BLE001 - closing all the same: the next start resumes from the last flush
                    log.warning("view store %s: flush before closing failed: %s", self.path, " ".join(str(exc).split())[:300])
            self.db.close()


class ReplacedStore(ViewStore):
    """Where the view's store is while a damaged one is being replaced: every read and write is
    a :class:`StoreDamaged` (a 503 saying so), and the damaged store waits here to be closed,
    copied aside and recreated off the serving loop."""

    def __init__(self, damaged: ViewStore):  # not ViewStore.__init__, which opens a store
        self.damaged = damaged
        self.path, self.cache_mb, self.closed = damaged.path, damaged.cache_mb, True
        self.damage = damaged.damage or "being replaced"

    def _refuse(self) -> StoreDamaged:
        return StoreDamaged(
            f"the API's view store is damaged ({self.damage}) and is being rebuilt from the topics; "
            "retry when /readyz answers 200"
        )

    def get(self, key: bytes) -> bytes | None:
        raise self._refuse()

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        raise self._refuse()

    def scan(self, prefix: bytes, after: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        raise self._refuse()

    def write(
        self, puts: dict[bytes, bytes | None], offsets: dict[tuple[str, int], int], counters: dict[str, int], logged: bool = True
    ) -> None:
        raise self._refuse()

    def flush(self) -> None:
        raise self._refuse()

    def persist(self) -> None:
        raise self._refuse()

    def flush_in_background(self, then: Callable[[], None]) -> bool:
        raise self._refuse()

    @property
    def unlogged(self) -> bool:
        return False

    def set_identity(self, identity: dict) -> None:
        raise self._refuse()

    def clear(self, identity: dict | None = None) -> None:
        raise self._refuse()

    def close(self) -> None:
        self.damaged.close()


def view_identity(topics: dict) -> dict:
    """What a store records of where it was built from: the format and the topic of each source."""
    return {"format": FORMAT, "topics": {source.value: topic for source, topic in topics.items()}}


def open_store(path: Path, cache_mb: int, identity: dict) -> Opened:
    """Open the store at ``path``; a missing, unreadable, other-format or other-topics store is
    replaced by an empty one (an unreadable one is first copied to ``<path>.corrupt``
    for a look). The directory itself is kept: it may be a mounted volume."""
    reason = _unusable(path, cache_mb, identity)
    if reason is None:
        return Opened(ViewStore(path, cache_mb), None)
    if path.exists() and any(path.iterdir()):
        if reason.startswith("store unreadable"):
            _set_aside(path, reason)
        else:
            log.warning("view store %s: %s; rebuilding from the topics", path, reason)
        _empty(path)
    else:
        log.info("view store %s: %s; building it from the topics", path, reason)
    return Opened(_create(path, cache_mb, identity), reason)


def replace_damaged(store: ViewStore, identity: dict) -> ViewStore:
    """Close a store found damaged, keep a copy at ``<path>.corrupt``, and open an empty one in its
    place. Slow (the copy): it runs on the follower's thread, never on the serving loop. A copy
    that fails is logged and skipped: it is for a look, and the rebuild must not wait on it."""
    store.close()
    try:
        _set_aside(store.path, f"damaged ({store.damage})")
    except OSError as exc:
        log.warning("view store %s: could not copy the damaged store aside (%s); rebuilding without the copy", store.path, exc)
    _empty(store.path)
    return _create(store.path, store.cache_mb, identity)


def _set_aside(path: Path, reason: str) -> None:
    aside = path.with_name(f"{path.name}.corrupt")  # the latest corrupt store only
    shutil.rmtree(aside, ignore_errors=True)
    shutil.copytree(path, aside)
    log.warning("view store %s: %s; copied to %s, rebuilding from the topics", path, reason, aside)


def _create(path: Path, cache_mb: int, identity: dict) -> ViewStore:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        store = ViewStore(path, cache_mb)
    except Exception as exc:  # noqa: BLE001 - a permission or disk problem: say where and what to set
        raise StoreUnavailable(
            f"cannot create the view store at {path} ({' '.join(str(exc).split())[:200]}); "
            "set STREAMSTATE_API_STORE_PATH to a writable directory"
        ) from None
    store.set_identity(identity)
    return store


def _empty(path: Path) -> None:
    """Remove what a directory holds, not the directory: it may be a mounted volume. CURRENT
    goes first: without it the rest is no store RocksDB opens, so a kill part-way leaves a
    directory the next start rebuilds, never a store missing some of its files."""
    current = path / "CURRENT"
    if current.exists():
        current.unlink()
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _unusable(path: Path, cache_mb: int, identity: dict) -> str | None:
    if not (path / "CURRENT").exists():
        return f"no store at {path}"
    try:
        store = ViewStore(path, cache_mb)
    except Exception as exc:  # rocksdict raises plain exceptions for corruption and I/O errors
        # Boundary: rocksdict hands over RocksDB's Status only as text ("IO error: While lock
        # file: <path>/LOCK: Resource temporarily unavailable"), with no type or code to match;
        # its lock failure is recognised by that wording, the one place the API does so.
        if "lock" in str(exc).lower():
            raise StoreUnavailable(
                f"the view store {path} is in use by another process ({' '.join(str(exc).split())[:200]}); "
                "stop it, or give this API its own STREAMSTATE_API_STORE_PATH"
            ) from None
        return f"store unreadable ({' '.join(str(exc).split())[:200]})"
    try:
        stored = store.identity()
    except Exception as exc:
        store.close()
        return f"store unreadable ({' '.join(str(exc).split())[:200]})"
    store.close()
    if stored is None or stored.get("format") != FORMAT:
        return f"store format {None if stored is None else stored.get('format')} is not {FORMAT}"
    if stored.get("topics") != identity.get("topics"):
        return f"store was built from topics {stored.get('topics')}, not {identity.get('topics')}"
    return None

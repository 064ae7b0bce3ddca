"""Which embedded store holds the API's view: RocksDB (rocksdict), LMDB (lmdb) or SQLite,
measured on the API's own access pattern.

    .venv/bin/python -m bench.api_store [--records 1000000] [--out bench/results/api_store.json]

Each engine runs in a fresh process (so its RSS is its own) and does what the view does:
1. load ``--records`` session snapshots (~450 B of JSON each, keys arriving as four
   interleaved ascending streams, as four partitions deliver them) in atomic batches of
   1,000: read the stored headers of the batch's keys (event-time comparison), then write
   the values and the partition offsets in one transaction;
2. close and reopen (a restart with the store present);
3. 100,000 random point reads (``GET /sessions/{id}``) and 2,000 pages of 100 keys after
   a random key (``GET /sessions?cursor=``);
4. report records/s, µs per read, ms per page, RSS after each phase and the size on disk.

The result decides the engine (docs/api-store.md); nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENGINES = ("rocksdict", "lmdb", "sqlite")
BATCH = 1000
READS = 100_000
PAGES = 2_000
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "api_store.json"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def keys_in_arrival_order(records: int) -> list[bytes]:
    streams = [list(range(p, records, 4)) for p in range(4)]
    order = [i for group in zip(*streams) for i in group]
    order += [i for stream in streams for i in stream[len(streams[-1]):]]
    return [f"s:user-{i:08d}".encode() for i in order]


def body(i: int) -> bytes:
    return (b'{"user_id":"user-%08d","ts":1700000000000,"open_session":{"start":1699999000000,"last_activity":'
            b'1700000000000,"events":12,"page_views":7,"clicks":4,"purchases":1,"purchase_total":19.99,'
            b'"current_activity":"click","activity_start":1699999990000},"behaviour":{"total_sessions":3,'
            b'"total_page_views":40,"total_events":77,"total_session_ms":5400000,"avg_session_ms":1800000.0},'
            b'"activities":{"page_view":{"first":1690000000000,"last":1700000000000}}}' % i)


HEADER = struct.Struct(">qB")


# --------------------------------------------------------------------------- engines
class Rocks:
    def __init__(self, path: Path):
        from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, Rdict

        self.path = path
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(64 << 20))
        table.set_bloom_filter(10, False)
        options.set_block_based_table_factory(table)
        options.set_compression_type(DBCompressionType.lz4())
        options.set_max_background_jobs(2)
        self.db = Rdict(str(path), options)

    def load_batch(self, keys, values, offset: int) -> None:
        from rocksdict import WriteBatch

        self.db.get(keys)  # multi-get of the stored headers
        batch = WriteBatch(raw_mode=True)
        for key, value in zip(keys, values):
            batch.put(key, value)
        batch.put(b"~offset", struct.pack(">q", offset))
        self.db.write(batch)

    def get(self, key):
        return self.db.get(key)

    def page(self, after: bytes, limit: int):
        it = self.db.iter()
        it.seek(after + b"\x00")
        out = []
        while it.valid() and len(out) < limit:
            out.append(it.value())
            it.next()
        return out

    def close(self):
        self.db.close()


class Lmdb:
    def __init__(self, path: Path):
        import lmdb

        path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(path), map_size=1 << 40, max_dbs=4, readahead=False, metasync=False, sync=False)

    def load_batch(self, keys, values, offset: int) -> None:
        with self.env.begin(write=True) as txn:
            for key in keys:
                txn.get(key)
            for key, value in zip(keys, values):
                txn.put(key, value)
            txn.put(b"~offset", struct.pack(">q", offset))

    def get(self, key):
        with self.env.begin(buffers=True) as txn:
            value = txn.get(key)
            return bytes(value) if value is not None else None

    def page(self, after: bytes, limit: int):
        with self.env.begin() as txn:
            cursor = txn.cursor()
            out = []
            if cursor.set_range(after + b"\x00"):
                for _, value in cursor:
                    out.append(value)
                    if len(out) == limit:
                        break
            return out

    def close(self):
        self.env.close()


class Sqlite:
    def __init__(self, path: Path):
        import sqlite3

        path.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path / "view.db"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA cache_size=-65536")
        self.db.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")

    def load_batch(self, keys, values, offset: int) -> None:
        db = self.db
        db.execute("BEGIN")
        marks = ",".join("?" * len(keys))
        db.execute(f"SELECT k, substr(v, 1, 9) FROM kv WHERE k IN ({marks})", keys).fetchall()
        db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", zip(keys, values))
        db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (b"~offset", struct.pack(">q", offset)))
        db.execute("COMMIT")

    def get(self, key):
        row = self.db.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return row[0] if row else None

    def page(self, after: bytes, limit: int):
        return [r[0] for r in self.db.execute("SELECT v FROM kv WHERE k > ? ORDER BY k LIMIT ?", (after, limit))]

    def close(self):
        self.db.close()


OPENERS = {"rocksdict": Rocks, "lmdb": Lmdb, "sqlite": Sqlite}


def disk_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6, 1)


def measure_engine(engine: str, records: int, workdir: Path) -> dict:
    path = workdir / engine
    keys = keys_in_arrival_order(records)
    values = [HEADER.pack(1_700_000_000_000, 1) + body(i) for i in range(records)]
    rss_data = rss_mb()
    store = OPENERS[engine](path)
    started = time.perf_counter()
    for start in range(0, records, BATCH):
        store.load_batch(keys[start:start + BATCH], values[start:start + BATCH], start + BATCH)
    load_s = time.perf_counter() - started
    rss_loaded = rss_mb()
    store.close()
    del values
    started = time.perf_counter()
    store = OPENERS[engine](path)
    reopen_s = time.perf_counter() - started
    rng = random.Random(7)
    sample = [f"s:user-{rng.randrange(records):08d}".encode() for _ in range(READS)]
    started = time.perf_counter()
    for key in sample:
        assert store.get(key) is not None
    get_us = (time.perf_counter() - started) / READS * 1e6
    started = time.perf_counter()
    for key in sample[:PAGES]:
        store.page(key, 100)
    page_ms = (time.perf_counter() - started) / PAGES * 1000
    result = {
        "engine": engine,
        "records": records,
        "load_records_per_s": round(records / load_s),
        "reopen_ms": round(reopen_s * 1000, 1),
        "get_us": round(get_us, 2),
        "page_of_100_ms": round(page_ms, 3),
        "rss_mb_input_data": rss_data,
        "rss_mb_after_load": rss_loaded,
        "rss_mb_after_reads": rss_mb(),
        "disk_mb": disk_mb(path),
    }
    store.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one engine in this process
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_engine(args.one, args.records, args.workdir)))
        return
    workdir = Path(tempfile.mkdtemp(prefix="bench-api-store-"))
    results = []
    try:
        for engine in args.engines.split(","):
            done = subprocess.run(
                [sys.executable, "-m", "bench.api_store", "--one", engine, "--records", str(args.records), "--workdir", str(workdir)],
                capture_output=True, text=True, check=True,
            )
            results.append(json.loads(done.stdout))
            print(json.dumps(results[-1]), flush=True)
            shutil.rmtree(workdir / engine, ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    doc = {"load_average_1m": round(os.getloadavg()[0], 2), "cores": os.cpu_count(), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Fault injection into the API's view store: every kind of damage in tests/reliability/damage.py,
at several offsets, in every kind of file RocksDB keeps (table files, MANIFEST, CURRENT, OPTIONS,
IDENTITY, the write-ahead log). Each case must end one of three ways, never a partial answer:

- the store is refused at open and rebuilt from the topics (``open_store`` gives the reason);
- it opens, and every read and every full walk equals what was written, up to the offsets it
  records (a write-ahead log cut short loses its tail: values and offsets together, so the
  API resumes from the earlier offsets and re-reads the rest);
- it opens, and a read meets the damage: :class:`StoreDamaged`, which the API answers with a
  503 while it rebuilds (the last test shows that through a real server).

The many cases run on the store itself (no broker); the review's example (64 bytes overwritten
in a data file of a 20,000-session store, then single reads and a cursor walk of /sessions)
runs through the real API process and broker.
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from streamstate_api import store as store_module
from streamstate_api.store import SESSION, StoreDamaged, ViewStore, open_store
from tests.api_builders import session_snapshot
from tests.integration.api_harness import ApiProcess, make_topics, publish, wait_until
from tests.reliability.damage import damages_of, garbage

IDENTITY = {"format": 1, "topics": {"sessions": "s", "series": "m", "alerts": "a"}}
BATCH, FLUSHED, IN_LOG = 200, 6, 4  # batches of sessions: 6 flushed to table files, 4 only in the log
OUTCOMES: Counter = Counter()


def _session_key(n: int) -> bytes:
    return SESSION + f"user-{n:06d}".encode()


def _build(path: Path, image: Path) -> None:
    """Batches of sessions, each written with the offset after it (as the view writes them); ``image``
    is the directory as a kill would leave it (closing would flush the log into a table file)."""
    store = open_store(path, 8, IDENTITY).store
    for batch in range(FLUSHED + IN_LOG):
        values = {_session_key(n): f"value-{n}".encode() * 8 for n in range(batch * BATCH, (batch + 1) * BATCH)}
        store.write(values, {("sessions", 0): batch + 1}, {"sessions": (batch + 1) * BATCH})
        if batch == FLUSHED - 1:
            store.db.flush()
    shutil.copytree(path, image)
    store.close()


def _outcome(path: Path) -> str:
    opened = open_store(path, 8, IDENTITY)
    store = opened.store
    try:
        if opened.rebuild_reason is not None:
            assert not list(store.scan(SESSION)), "a store rebuilt at open must start empty"
            return "refused at open, rebuilt"
        try:
            batches = store.offsets().get(("sessions", 0), 0)
            expected = {_session_key(n): f"value-{n}".encode() * 8 for n in range(batches * BATCH)}
            walked = dict(store.scan(SESSION))
            assert walked == expected, (
                f"a walk gave {len(walked)} sessions where the recorded offset {batches} means {len(expected)}"
            )
            for key, value in random.Random(1).sample(sorted(expected.items()), min(50, len(expected))):
                assert store.get(key) == value
        except StoreDamaged as damaged:
            assert store.damage is not None and "rebuilt" in str(damaged)
            return "damage found on read: 503, rebuilt"
        return "opened, equal up to its offsets" + ("" if batches == FLUSHED + IN_LOG else " (log tail lost)")
    finally:
        store.close()


def _files(path: Path) -> dict[str, Path]:
    found = {}
    for file in sorted(path.iterdir()):
        kind = file.suffix.lstrip(".") if file.suffix in (".sst", ".log") else file.name.split("-")[0]
        if kind in ("sst", "log", "MANIFEST", "CURRENT", "OPTIONS", "IDENTITY") and file.stat().st_size:
            found.setdefault(kind, file)
    return found


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("store")
    path = root / "killed"
    _build(root / "view", path)
    assert set(_files(path)) == {"sst", "log", "MANIFEST", "CURRENT", "OPTIONS", "IDENTITY"}, sorted(_files(path))
    return path


@pytest.mark.parametrize("kind", ["sst", "log", "MANIFEST", "CURRENT", "OPTIONS", "IDENTITY"])
def test_every_damage_to_a_store_file_is_rebuilt_or_read_exactly(kind, pristine, tmp_path):
    rng = random.Random(kind)
    name = _files(pristine)[kind].name
    cases = list(damages_of(pristine / name, rng, offsets=8))
    for damage in cases:
        path = tmp_path / "view"
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(pristine, path)
        damage.apply(path / name)
        OUTCOMES[(kind, _outcome(path))] += 1
    print(f"\n{kind} ({name}): {len(cases)} damages: " + ", ".join(f"{o}: {n}" for (k, o), n in sorted(OUTCOMES.items()) if k == kind))


@pytest.mark.slow
def test_a_damaged_data_file_gives_503s_then_a_rebuild_and_the_same_answers(bootstrap, new_topic, tmp_path):
    """The review's case: 64 bytes overwritten in a table file of a 20,000-session store."""
    topics = make_topics(new_topic)
    users = [f"user-{n:05d}" for n in range(20_000)]
    publish(bootstrap, topics.sessions, [(u, session_snapshot(u, ts=1_000 + i).model_dump_json().encode()) for i, u in enumerate(users)])
    store_path = tmp_path / "api-store"

    def start() -> ApiProcess:
        api = ApiProcess(bootstrap, topics, tmp_path / "api.log", api_store_path=str(store_path))
        api.wait_ready()
        return api

    def walk(api: ApiProcess) -> list[str] | None:
        """Every user id by cursor paging; None when a page answered 503 (never a short walk)."""
        seen, cursor = [], None
        while True:
            response = api.get("/sessions", limit=1000, **({"cursor": cursor} if cursor else {}))
            if response.status_code == 503:
                assert "rebuilt" in response.json()["detail"], response.text
                return None
            assert response.status_code == 200, response.text
            page = response.json()
            seen += [item["user_id"] for item in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return seen

    api = start()
    reference = {u: api.get(f"/sessions/{u}").json()["session"] for u in users[::500]}
    assert walk(api) == users
    api.stop()
    table = max(store_path.glob("*.sst"), key=lambda f: f.stat().st_size)
    garbage(table.stat().st_size // 3, length=64, seed=7).apply(table)

    api = start()  # the damage is inside a block: the store opens, and reads meet it
    answers = Counter()
    for user in users[::500]:
        response = api.get(f"/sessions/{user}")
        answers[response.status_code] += 1
        assert response.status_code in (200, 503), response.text
        if response.status_code == 200:
            assert response.json()["session"] == reference[user]
    assert walk(api) in (None, users), "a walk of /sessions must end complete or with a 503, never short"
    ready = wait_until(lambda: (r := api.get("/readyz")).status_code == 503 and r.json(), 30, "readyz to show the rebuild")
    assert "damaged" in json.dumps(ready), ready
    api.wait_ready(120)
    assert walk(api) == users
    assert {u: api.get(f"/sessions/{u}").json()["session"] for u in users[::500]} == reference
    assert (store_path.parent / "api-store.corrupt").is_dir()
    api.stop()
    print(f"\ndamaged table file: answers before the rebuild {dict(answers)}; after it, all 20,000 sessions equal")


def test_a_kill_at_any_step_of_a_rebuild_leaves_a_store_the_next_start_rebuilds(pristine, tmp_path, monkeypatch):
    """A rebuild empties the directory file by file (it may be a mounted volume), then creates
    the new store, then records its identity. Killed between any two of those steps, the next
    start must find no store it would read as partly there: it rebuilds, or (before the first
    step) reads the old one exactly. The kill is the product's own emptying stopped after
    each file it removes."""
    path = tmp_path / "view"
    files = len(list(pristine.iterdir()))
    outcomes = Counter()
    real_unlink = Path.unlink
    for allowed in range(files + 1):
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(pristine, path)
        removed = []

        def unlink(self, missing_ok=False, allowed=allowed, removed=removed):
            if len(removed) == allowed:
                raise _Killed
            removed.append(self.name)
            real_unlink(self, missing_ok)

        monkeypatch.setattr(Path, "unlink", unlink)
        try:
            store_module._empty(path)
        except _Killed:
            pass
        monkeypatch.setattr(Path, "unlink", real_unlink)
        outcome = _outcome(path)
        assert outcome == ("opened, equal up to its offsets" if allowed == 0 else "refused at open, rebuilt"), (removed, outcome)
        outcomes[outcome] += 1
    # Killed after the new store was created, before its identity was recorded.
    shutil.rmtree(path)
    ViewStore(path, 8).close()
    assert _outcome(path) == "refused at open, rebuilt"
    print(f"\nrebuild killed after each of its {files + 1} steps: {dict(outcomes)}; after creating, before the identity: rebuilt")


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""

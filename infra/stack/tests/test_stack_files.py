"""Every file the stack writes is written whole or not at all (streamstate_stack.files.write_atomic),
and the object store's credentials file is read back only when it is whole.

The kills are real: a child process writes with its file size limit (RLIMIT_FSIZE) below the
file's size and SIGXFSZ at its default action, so the kernel kills it in the middle of the
write, at a byte count the test chooses rather than at a moment it would have to guess.
"""

from __future__ import annotations

import ast
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from streamstate_pipeline.errors import StackError
from streamstate_stack.files import write_atomic
from streamstate_pipeline.settings import REPO_ROOT
from streamstate_stack.servers import KafkaBroker, S3Credentials

KILLED_MID_WRITE = """
import resource, signal, sys
from pathlib import Path
from streamstate_stack.servers import KafkaBroker, S3Credentials
limit = int(sys.argv[2])
# Python ignores SIGXFSZ; at its default action the kernel kills the process at the limit.
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
home = Path(sys.argv[3])
if sys.argv[1] == "broker-config":
    KafkaBroker(home, 29001, 29002).write_config()
else:
    S3Credentials.for_home(home)
"""


def _killed_mid_write(what: str, limit: int, home: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", KILLED_MID_WRITE, what, str(limit), str(home)],
        env=environment, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == -signal.SIGXFSZ, f"not killed mid-write: exit {result.returncode}\n{result.stderr}"
    return result


def test_a_broker_config_write_killed_midway_leaves_the_old_file(tmp_path):
    old = KafkaBroker(tmp_path, 28001, 28002)
    old.write_config()
    before = (tmp_path / "server.properties").read_text()
    assert len(before) > 100
    _killed_mid_write("broker-config", 100, tmp_path)
    assert (tmp_path / "server.properties").read_text() == before
    # The next start writes the new one whole.
    KafkaBroker(tmp_path, 29001, 29002).write_config()
    assert (tmp_path / "server.properties").read_text() == KafkaBroker(tmp_path, 29001, 29002).properties()


def test_credentials_whose_first_write_was_killed_are_never_read_as_a_short_secret(tmp_path):
    # 15 bytes: the user's line and 3 characters of the password, what an in-place write left.
    _killed_mid_write("credentials", 15, tmp_path)
    credentials = S3Credentials.for_home(tmp_path)
    assert credentials.access_key == "streamstate"
    assert len(credentials.secret_key) == 32, "a new, whole password"
    assert S3Credentials.for_home(tmp_path) == credentials, "and it is kept"
    assert stat.S_IMODE((tmp_path / "credentials").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "text",
    ["", "streamstate\nabc", "streamstate\n", "streamstate", "streamstate\nabcdefghijklmnopqrstu", "st\nabcdefghijkl\n",
     "streamstate\nabc\n", "streamstate\nabcdefghijkl\nmore\n"],
    ids=["empty", "cut-3-chars", "cut-after-user", "cut-in-user", "cut-in-password", "short-user", "short-password", "three-lines"],
)
def test_a_damaged_credentials_file_is_refused_by_name_with_the_remedy(tmp_path, text):
    path = tmp_path / "credentials"
    path.write_text(text)
    with pytest.raises(StackError) as refused:
        S3Credentials.for_home(tmp_path)
    message = str(refused.value)
    assert str(path) in message and "Delete it" in message
    secret = text.split("\n")[1] if text.count("\n") >= 1 else ""
    assert not secret or secret not in message, "the message never shows the secret"
    assert path.read_text() == text, "the damaged file is left for the user to look at"


def test_write_atomic_writes_whole_files_with_the_mode_asked_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "secret"
    assert write_atomic(target, "one\n", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert write_atomic(target, b"two\n", mode=0o640)
    assert target.read_text() == "two\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not write_atomic(target, "three\n", exclusive=True), "exclusive never replaces"
    assert target.read_text() == "two\n"
    assert write_atomic(tmp_path / "new", "four\n", exclusive=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "secret"]


# Writing modes of open(); reading ones ("r", "rb") are fine. "a": logs, appended as they go.
_WRITE_MODES = set("wx+")


def _direct_writes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("write_text", "write_bytes", "fdopen"):
            found.append(f"{path.name}:{node.lineno} {name}")
        elif name == "open" and isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "os":
            found.append(f"{path.name}:{node.lineno} os.open")
        elif name == "open":
            modes = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            modes += [k.value.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
            if any(_WRITE_MODES & set(str(mode)) for mode in modes):
                found.append(f"{path.name}:{node.lineno} open({modes[0]!r})")
    return found


def test_the_stack_writes_its_files_only_through_write_atomic():
    stack = REPO_ROOT / "infra" / "stack" / "src" / "streamstate_stack"
    sources = [p for p in sorted(stack.glob("*.py")) if p.name != "files.py"] + [REPO_ROOT / "pipeline" / "src" / "streamstate_pipeline" / "kinesis.py"]
    direct = [write for path in sources for write in _direct_writes(path)]
    assert not direct, "written in place (a crash leaves them cut); use streamstate_stack.files.write_atomic:\n" + "\n".join(direct)

"""The examples and tables of the docs are the code's: the tester examples run, and the topic and
record-kind tables of docs/architecture.md list what the topic file and the Kind enum hold."""

from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path

import streamstate.state.tester as tester_module
from streamstate_jobs.kinds import Kind

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n") + len(heading) + 1
    following = re.search(rf"^#{{1,{level}}} ", text[start:], re.M)
    return text[start : start + following.start()] if following else text[start:]


def table_rows(text: str) -> list[list[str]]:
    rows = [line.strip().strip("|").split("|") for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows[2:]]  # past the header and its rule


def test_the_readme_example_of_the_tester_runs():
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", section(readme, "### Testing your function without Spark"), re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})


def test_the_tester_module_example_runs():
    code = re.search(r"Example::\n\n(.*?)\n\n", tester_module.__doc__, re.S).group(1)
    exec(compile(textwrap.dedent(code), tester_module.__file__, "exec"), {})


def test_the_topic_table_is_the_topic_file():
    defined = tomllib.loads((ROOT / "infra" / "kafka" / "topics.toml").read_text())["topics"]
    days = {"604800000": "7 days", "86400000": "1 day"}
    rows = table_rows(section(ARCHITECTURE, "## Topics"))
    documented = {row[0].strip("`"): (int(row[1]), row[2]) for row in rows}
    expected = {
        name: (
            topic["partitions"],
            "compacted" if topic["config"].get("cleanup.policy") == "compact" else days[topic["config"]["retention.ms"]],
        )
        for name, topic in defined.items()
    }
    assert documented == expected


def test_the_kind_table_lists_every_kind():
    rows = table_rows(section(ARCHITECTURE, "### Record kinds and routing"))
    documented = {kind.strip("` ") for row in rows for kind in row[0].split(",")}
    assert documented == {kind.value for kind in Kind}

"""The state library's documentation cannot drift from its code.

Every ```python block of library/README.md and of the API reference's pages (docs/library/)
runs: here when it needs no Spark, in tests/integration/test_library_docs_on_spark.py when it
does (it starts a SparkSession). A block is left out only by a marker comment in it
(``# docs: not run: <why>``), and the README's main example never is. And the reference
builds with ``mkdocs build --strict`` (mkdocstrings reading the docstrings), so a renamed or
removed name it documents fails here. The docs group (mkdocs, mkdocstrings) is part of what
``make setup`` installs: this test installs nothing and is never skipped for want of it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "library" / "README.md"
MKDOCS_CONFIG = REPO_ROOT / "docs" / "library" / "mkdocs.yml"
PAGES = REPO_ROOT / "docs" / "library" / "docs"
NOT_RUN = "# docs: not run:"
MAIN_EXAMPLE = "## Example"  # the README's section of the main example


@dataclass(frozen=True)
class Block:
    path: Path
    section: str  # the heading the block is under
    number: int  # its position in the file, from 1
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}#{self.number}"

    @property
    def needs_spark(self) -> bool:
        return "SparkSession" in self.code

    @property
    def not_run(self) -> bool:
        return NOT_RUN in self.code


def documents() -> list[Path]:
    return [README, *sorted(PAGES.glob("*.md"))]


def python_blocks(path: Path) -> list[Block]:
    blocks = []
    section = ""
    text = path.read_text()
    for match in re.finditer(r"^(#{1,6} [^\n]*)$|^```python\n(.*?)^```", text, re.M | re.S):
        if match.group(1):
            section = match.group(1)
        else:
            blocks.append(Block(path, section, len(blocks) + 1, match.group(2)))
    return blocks


def all_blocks() -> list[Block]:
    return [block for path in documents() for block in python_blocks(path)]


def test_the_blocks_are_found_and_none_of_the_readmes_main_example_is_left_out():
    blocks = all_blocks()
    readme = [b for b in blocks if b.path == README]
    main = [b for b in readme if b.section == MAIN_EXAMPLE]
    assert len(main) == 1 and "map_with_state" in main[0].code and main[0].needs_spark
    assert not [b.name for b in readme if b.not_run], "the README's examples all run"
    assert len(readme) >= 2 and len(blocks) > len(readme)  # the README's and the pages' own
    # A block left out says why: the marker is the only way, and it names a reason.
    for block in blocks:
        if block.not_run:
            assert re.search(re.escape(NOT_RUN) + r" \S", block.code), block.name


@pytest.mark.parametrize("block", [b for b in all_blocks() if not b.needs_spark], ids=lambda b: b.name)
def test_a_block_without_spark_runs(block):
    if block.not_run:
        pytest.skip(block.code[block.code.index(NOT_RUN):].splitlines()[0])
    exec(compile(block.code, block.name, "exec"), {"__name__": "__docs__"})


def test_the_api_reference_builds_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(MKDOCS_CONFIG), "-d", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed (make setup installs the docs group):\n{result.stdout}\n{result.stderr}"
    page = (tmp_path / "site" / "state" / "index.html").read_text()
    # The reference holds the docstrings, not only the headings.
    assert "streamstate.state.spec.StateSpec" in page and "get_option" in page
    assert "Keep per-key state over a streaming" in (tmp_path / "site" / "operators" / "index.html").read_text()

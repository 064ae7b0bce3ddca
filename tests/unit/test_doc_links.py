"""The repository's docs stand on their own: every relative Markdown link resolves to a file in the
repository (and to a heading, when it names one), and nothing points at material outside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The project's own docs: installed packages under infra/ (the Kinesis server's node_modules) are not.
DOCS = sorted([
    ROOT / "README.md", ROOT / "RELIABILITY.md", *(ROOT / "docs").glob("*.md"),
    *(path for path in (ROOT / "infra").rglob("*.md") if "node_modules" not in path.parts),
])

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
# Spelled in pieces so that this file does not name them itself.
OUTSIDE = ("../" + "shared", "/work/" + "shared", "ARCHITECTURE" + ".md", "ENVIRONMENT" + ".md", "STYLE" + ".md")


def prose(text: str) -> str:
    """The text outside fenced code blocks and code spans: where a link is a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text.replace("`", "").lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base, n = slug(heading), 0
        name = base
        while name in found:  # repeated headings get -1, -2, ... as on GitHub
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text())) if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def test_the_link_checker_finds_what_it_must():
    text = "[a](docs/x.md#y) ![i](img.png) `[not](a.md)` [web](https://example.org)\n```\n[no](b.md)\n```\n"
    assert LINK.findall(prose(text)) == ["docs/x.md#y", "img.png", "https://example.org"]
    assert slug("Profiles: embedded and production") == "profiles-embedded-and-production"
    assert slug("The `kind` column, and routing") == "the-kind-column-and-routing"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_relative_link_resolves(doc: Path):
    broken = []
    for target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        resolved = doc if not file_part else (doc.parent / file_part).resolve()
        if not resolved.exists() or ROOT not in (resolved, *resolved.parents):
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with anchor #{anchor} in {resolved.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_docs_are_linked_from_the_readme_and_architecture():
    readme = relative_links(ROOT / "README.md")
    assert "docs/architecture.md" in readme
    linked = {t.partition("#")[0] for t in relative_links(ROOT / "docs" / "architecture.md")}
    assert "adding-a-job.md" in linked


def tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_nothing_points_outside_the_repository():
    offenders = []
    for path in tracked_files():
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # binary
        for needle in OUTSIDE:
            if needle in text:
                offenders.append(f"{path.relative_to(ROOT)} mentions {needle}")
    assert not offenders, "; ".join(offenders)

"""research/'s pages hang together with the rest: every record a page names is there, every
record is named by research/README.md or research/reproduction.md, and every relative link of
every Markdown page in the repository (the product's and the search's, the records' READMEs
included) resolves, to a heading where it names one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from research.tests.tools import RECORDS
from tests.train_helpers import REPO

RESEARCH = REPO / "research"
INDEXES = [RESEARCH / "README.md", RESEARCH / "reproduction.md"]
NAMED_RECORD = re.compile(r"(?<![\w/])((?:research/)?records/[^\s`)\"',;:]+)")
LINK = re.compile(r"\]\(<?([^)\s>]+)>?\)")


def pages() -> list[Path]:
    """Return every Markdown file of the repository, tracked or new (not git-ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return [REPO / name for name in listed if (REPO / name).is_file()]


def test_every_record_a_page_names_is_there_and_every_record_is_indexed() -> None:
    named: set[str] = set()
    readers = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    readers += [REPO / "benchmarks" / "README.md", *INDEXES]
    for page in readers:
        for path in NAMED_RECORD.findall(page.read_text(encoding="utf-8")):
            path = path.rstrip(".")
            full = path if path.startswith("research/") else f"research/{path}"
            assert list(REPO.glob(full)), f"{page.relative_to(REPO)} names {path}, not there"
            if page in INDEXES:
                named.add(full.split("/")[2])
    records = {path.name for path in RECORDS.iterdir()}
    assert records <= named, f"records neither index names: {sorted(records - named)}"


def heading_anchors(page: Path) -> set[str]:
    """Return the anchors GitHub gives the page's headings (lower case, punctuation dropped,
    spaces as hyphens, a repeated one numbered)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for heading in re.findall(r"^#+\s+(.*?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def is_sweep_report(page: Path) -> bool:
    """A report `python -m hornn_dist.report` wrote, kept in a record as written: its plots'
    PNGs are not always kept beside it."""
    with page.open(encoding="utf-8") as file:
        return file.readline().startswith("# HORNN sweep report")


def test_every_relative_link_of_every_page_resolves() -> None:
    checked, broken = 0, []
    for page in pages():
        if is_sweep_report(page):
            continue
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for target in LINK.findall(text):
            if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path) if path else page
            checked += 1
            where = f"{page.relative_to(REPO)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest):
                broken.append(f"{where} (no such heading)")
    assert checked > 50, checked  # the pages link to each other
    assert not broken, "\n".join(broken)

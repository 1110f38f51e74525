"""The docs hang together: docs/config.md is what the code generates, every page is one link
from README, every relative link resolves, and every record the docs name exists (README's
results tables: tests/test_records.py)."""

from __future__ import annotations

import dataclasses
import re

from hornn_dist.config_docs import field_comments, render
from tests.train_helpers import REPO, run_here

README = (REPO / "README.md").read_text(encoding="utf-8")
PAGES = sorted((REPO / "docs").glob("*.md"))


def test_config_doc_is_what_the_command_writes() -> None:
    proc = run_here("hornn_dist.config_docs", "--check")
    assert proc.returncode == 0, proc.stderr
    assert (REPO / "docs" / "config.md").read_text(encoding="utf-8") == render()


@dataclasses.dataclass
class _Example:
    # the meaning, on two lines
    # above the field
    first: int = 1  # and the end of its line
    second: str = "x"  # its line alone

    third: bool = False


def test_a_field_meaning_is_its_comment_above_and_on_its_line() -> None:
    assert field_comments(_Example) == {
        "first": "the meaning, on two lines above the field and the end of its line",
        "second": "its line alone",
        "third": "",
    }


def test_the_config_doc_shows_each_fields_comment() -> None:
    from hornn_dist.config import TrainConfig

    row = re.search(r"^\| `cuda_graph` \| `true` \| (.*) \|$", render(), re.MULTILINE)
    assert row and row.group(1) == field_comments(TrainConfig)["cuda_graph"]
    assert "under every `mixed_precision`" in row.group(1)  # not "no or bf16" as it once said


def test_every_docs_page_is_one_link_from_readme() -> None:
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)[)#]", README))
    assert linked == {str(page.relative_to(REPO)) for page in PAGES}


def test_every_relative_link_resolves() -> None:
    for page in [REPO / "README.md", *PAGES, REPO / "benchmarks" / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://")):
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(REPO)}: {target}"


def test_every_record_the_docs_name_exists_and_every_record_is_named() -> None:
    """A record the docs name is there, and no record lies in research/records/ unnamed."""
    named: set[str] = set()
    for page in [REPO / "README.md", *PAGES, REPO / "benchmarks" / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for path in re.findall(r"(?<![\w/])((?:benchmarks/)?records/[^\s`)\"',;:]+)", text):
            path = path.rstrip(".")
            full = path if path.startswith("benchmarks/") else f"benchmarks/{path}"
            assert list(REPO.glob(full)), (
                f"{page.relative_to(REPO)} names {path}, which is not there"
            )
            named.add(full.split("/")[2])
    records = {path.name for path in (REPO / "research" / "records").iterdir()}
    assert records <= named, f"records no page names: {sorted(records - named)}"


def test_the_trainer_state_version_the_docs_give_is_the_codes() -> None:
    from hornn_dist.run_state import VERSION

    training = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    (said,) = re.findall(r"`trainer_state.json` has a `version` \((\d+),", training)
    assert int(said) == VERSION
    assert f"this code resumes version {VERSION}:" in training


def test_readmes_report_command_names_the_extra_its_plots_need() -> None:
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    plots = {name for name, needs in extras.items() if any("matplotlib" in n for n in needs)}
    (line,) = [line for line in README.splitlines() if "python -m hornn_dist.report" in line]
    named = re.findall(r'pip install -e "\.\[(\w+)\]"', line)
    assert named and set(named) <= plots and "--no-plots" in line, (line, plots)

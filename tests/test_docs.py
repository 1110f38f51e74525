"""The docs hang together: docs/config.md is what the code generates, every page is one link
from README, and every relative link to the product's own files resolves."""

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
    assert "under every `mixed_precision`" in row.group(1)  # every precision


def test_every_docs_page_is_one_link_from_readme() -> None:
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)[)#]", README))
    assert linked == {str(page.relative_to(REPO)) for page in PAGES}


def test_every_relative_link_resolves() -> None:
    """A link into the search's folder is its own tests' to check: no product test reads it."""
    search = REPO / "research"
    for page in [REPO / "README.md", *PAGES, REPO / "benchmarks" / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://")):
                continue
            path = (page.parent / target).resolve()
            if path == search or search in path.parents:
                continue
            assert path.exists(), f"{page.relative_to(REPO)}: {target}"


def test_the_trainer_state_version_the_docs_give_is_the_codes() -> None:
    from hornn_dist.run.run_state import VERSION

    training = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    (said,) = re.findall(r"`trainer_state.json` has a `version` \((\d+),", training)
    assert int(said) == VERSION
    assert f"this code reads version {VERSION}:" in training


def test_readmes_report_command_names_the_extra_its_plots_need() -> None:
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    plots = {name for name, needs in extras.items() if any("matplotlib" in n for n in needs)}
    (line,) = [line for line in README.splitlines() if "python -m hornn_dist.report" in line]
    named = re.findall(r'pip install -e "\.\[(\w+)\]"', line)
    assert named and set(named) <= plots and "--no-plots" in line, (line, plots)

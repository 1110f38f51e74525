"""The README's demo command runs end to end (shortened), and its commands match what CI runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from hornn_dist.run.checkpoint import list_checkpoints
from hornn_dist.run.run_state import TrainerState
from tests.train_helpers import REPO, check_ok, run_events, run_module

README = (REPO / "README.md").read_text(encoding="utf-8")


def _setup_commands() -> list[str]:
    section = README.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one() -> None:
    demo, tests = _setup_commands()
    assert (
        demo.startswith("pip install -c constraints.txt torch==2.13.0")
        and "configs/demo.toml" in demo
    )
    assert tests.endswith("python -m pytest -q -n 2 --dist loadfile")  # the default tier
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    for part in tests.split(" && ")[:-1]:  # CI installs the same way ...
        assert part.replace("pip install", "python -m pip install -q") in ci or part in ci, part
    full = re.search(r"The full tier, what CI \(`.ci/run`\) runs: `([^`]+)`", README).group(1)
    assert full.startswith(tests.split(" && ")[-1] + ' -m ""')  # ... and runs every tier
    assert f"\n{full} --durations=30\n" in ci


@pytest.mark.integration
def test_readme_demo_command_trains_end_to_end(tmp_path: Path) -> None:
    demo = _setup_commands()[0].split(" && ")[-1]
    argv = shlex.split(demo)
    assert argv[:3] == ["python", "-m", "hornn_dist.train"]
    out = tmp_path / "demo"
    proc = run_module(
        "hornn_dist.train",
        *argv[3:],
        "--set", "train.max_steps=15",
        "--set", f"train.output_dir={out}",
        "--set", f"data.cache_dir={tmp_path / 'cache'}",
        "--set", "log.every=5",
        "--set", "train.eval_batch_size=100",
    )  # fmt: skip
    check_ok(proc)
    assert "prepared" in proc.stderr and "vocab" in proc.stderr
    # the recipe as resolved for the demo's FOFE-3 at H 128 (docs/training.md, "The default recipe")
    assert "recipe: init scaled: every weight ~ N(0, 0.1)" in proc.stderr
    assert "clip norm (auto) 1, column norm 4" in proc.stderr
    (test,), (begun,) = run_events(out, "test"), run_events(out, "start")
    for ppl in (test["ppl"], test["last_ppl"]):  # better than uniform after a few steps
        assert 1.0 < ppl < begun["vocabulary"]
    state = TrainerState.read(list_checkpoints(out)[-1])
    assert state.step == 15


def test_docs_document_every_config_key_with_its_default() -> None:
    import dataclasses

    from hornn_dist.config import _SECTION_TYPES, SECTIONS

    config_doc = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    for section in SECTIONS:
        assert f"`[{section}]`" in config_doc, section
        defaults = _SECTION_TYPES[section]()
        for field in dataclasses.fields(defaults):
            row = re.search(rf"^\| `{field.name}` \| `([^`]*)` \|", config_doc, re.MULTILINE)
            assert row, f"{section}.{field.name} is not documented in docs/config.md"
            value = getattr(defaults, field.name)
            shown = row.group(1)
            if isinstance(value, bool):
                assert shown == str(value).lower(), field.name
            elif isinstance(value, int | float):
                assert float(shown) == value, field.name


def _layout_modules() -> tuple[set[str], set[str]]:
    """Return (modules, folders) that docs/layout.md's tree names, as paths from the repo root."""
    block = (REPO / "docs" / "layout.md").read_text(encoding="utf-8").split("```\n", 2)[1]
    modules, folders = set(), set()
    stack: list[tuple[int, str]] = []  # (indent, folder path)
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        here = stack[-1][1] if stack else ""
        first = line.split()[0] if line.strip() else ""
        if first.endswith("/"):
            folder = here + first
            folders.add(folder.rstrip("/"))
            stack.append((indent, folder))
            continue
        for word in line.split():
            if word.endswith(".py"):
                modules.add(here + word)
            else:
                break  # the description starts
    return modules, folders


def test_the_layout_page_names_every_module_and_only_real_ones() -> None:
    listed, folders = _layout_modules()
    package = REPO / "hornn_dist"
    real = {
        str(path.relative_to(REPO))
        for path in package.rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    }
    assert listed == real, f"docs/layout.md is missing {real - listed}, lists {listed - real}"
    for folder in folders:
        assert (REPO / folder).is_dir(), folder

"""The commands README.md and docs/ show exist, and their flags, config files and --set keys parse."""

from __future__ import annotations

import importlib
import re
import shlex

import pytest

from hornn_dist.config import load_config
from tests.train_helpers import REPO

DOCS = ["README.md", "launch/README.md"] + sorted(
    str(page.relative_to(REPO)) for page in (REPO / "docs").glob("*.md")
)


def _commands() -> list[tuple[str, str]]:
    """Return (doc, command line) of every hornn_dist command in the docs' bash blocks."""
    found = []
    for doc in DOCS:
        text = (REPO / doc).read_text(encoding="utf-8")
        for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#\s.*$", "", line).strip()  # a trailing comment
                for part in line.split(" && "):
                    if "hornn_dist." in part and not part.startswith("pip "):
                        found.append((doc, part))
    return found


COMMANDS = _commands()


def _module_and_args(command: str) -> tuple[str, list[str]]:
    """Return the hornn_dist module a command runs and the arguments it passes to it."""
    argv = shlex.split(command)
    start = argv.index("-m")
    if argv[0] == "accelerate":  # accelerate launch's own flags come before its -m
        start = max(i for i, word in enumerate(argv) if word == "-m")
    return argv[start + 1], argv[start + 2 :]


def test_the_docs_show_every_command() -> None:
    modules = {_module_and_args(command)[0] for _, command in COMMANDS}
    for name in ("train", "prepare", "evaluate", "generate", "export"):
        assert f"hornn_dist.{name}" in modules, name


@pytest.mark.parametrize(("doc", "command"), COMMANDS, ids=[f"{d}: {c}" for d, c in COMMANDS])
def test_command_parses(doc: str, command: str) -> None:
    module_name, args = _module_and_args(command)
    module = importlib.import_module(module_name)
    parsed = vars(module.parse_args(args))
    config = parsed.get("config")
    if config is not None:  # the file exists and the --set keys are real keys with valid values
        assert (REPO / config).is_file(), f"{doc}: {config} does not exist"
        load_config(REPO / config, parsed.get("overrides", []))

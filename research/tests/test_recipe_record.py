"""research/reproduction.md "Recipes" and README's demo line state the recipe-search record's numbers
(the records' printed tables: research/tests/test_records.py)."""

from __future__ import annotations

import json
import re

from research.tests.tools import RECORDS
from tests.train_helpers import REPO

RECORD = RECORDS / "2026-11-27-cpu-recipe-search"
README = (REPO / "README.md").read_text(encoding="utf-8")
REPRODUCTION = (REPO / "research" / "reproduction.md").read_text(encoding="utf-8")
MODELS = {"RNN (order 1)": "rnn", "HORNN-3 `sum`": "sum", "HORNN-3 `max`": "max",
          "HORNN-3 `fofe`": "fofe", "HORNN-3 `gated`": "gated", "LSTM": "lstm"}  # fmt: skip


def screen_runs() -> dict[tuple[str, str, str], list[float]]:
    """Return {(model, init p/s, clip): validation ppl per epoch} of the H100 screen's runs."""
    runs = {}
    for folder in (RECORD / "h100_screen" / "runs").iterdir():
        model, recipe = folder.name.split("-", 1)
        state = json.loads((folder / "trainer_state.json").read_text())
        clip = "value 5" if recipe.endswith("v5") else "norm 0.25"
        init = recipe[0] if recipe[0] in "ps" else "p"  # lstm-v5: the LSTM's one init
        runs[(model, init, clip)] = [round(v["ppl"], 2) for v in state["valid_history"]]
    return runs


def test_the_recipes_table_is_the_screen_records() -> None:
    section = REPRODUCTION.split("## Recipes\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*(.*?)\s*\| ([\d.]+) \| (value 5|norm 0\.25) \|[^|]*\| ([\d.]+) \| \**([\d.]+)\** \|$",
                      section, re.MULTILINE)  # fmt: skip
    runs = screen_runs()
    assert len(rows) == len(runs) == 16
    model = ""
    for name, std, clip, first, last in rows:
        model = MODELS.get(name, model)  # a blank model cell continues the one above
        init = "p" if float(std) == 0.1 else "s"
        ppl = runs.pop((model, init, clip))
        assert (float(first), float(last)) == (ppl[0], ppl[-1]), (model, std, clip)
    assert not runs


def test_the_demo_numbers_are_the_records() -> None:
    state = json.loads((RECORD / "cpu" / "runs" / "demo-norm1" / "trainer_state.json").read_text())
    valid, test = state["valid_history"][-1]["ppl"], state["test"]["ppl"]
    assert f"valid ppl {valid:.2f}, test ppl {test:.2f}" in REPRODUCTION
    assert f"ppl {test:.2f}` (valid ppl {valid:.2f}" in README

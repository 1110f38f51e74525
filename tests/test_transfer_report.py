"""A transfer screen: a sweep over [corpora] with a base per group, trained, and `report`'s
table per corpus (first window against the vocabulary, validation by epoch, test, rank)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hornn_dist.config import read_toml, to_toml, toml_value
from tests.train_helpers import markdown_table, run_here, write_markov_text, write_sweep


@pytest.mark.integration  # trains four tiny runs in child processes
def test_a_transfer_sweep_reports_each_config_on_each_corpus(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, "")
    tiny = read_toml(tmp_path / "tiny.toml", "config", "")
    # a start far from a uniform guess: logits of std ~30 at init, a first window above V
    wild = {**tiny, "model": {**tiny["model"], "init_std": 3.0, "recurrent_init": "paper"}}
    (tmp_path / "wild.toml").write_text(to_toml(wild))
    other = tmp_path / "other"
    other.mkdir()
    for split, seed in (("train", 7), ("valid", 8), ("test", 9)):
        write_markov_text(other / f"{split}.txt", 420 if split == "train" else 200, seed)

    def corpus(folder: Path, name: str) -> str:
        data = {
            **tiny["data"],
            "name": name,
            **{s: [str(folder / f"{s}.txt")] for s in ("train", "valid", "test")},
        }
        return "{ " + ", ".join(f'"data.{k}" = {toml_value(v)}' for k, v in data.items()) + " }"

    path.write_text(
        path.read_text().replace('base = "tiny.toml"\n', "")
        + 'layout = "transfer"\nset = { "train.epochs" = 2 }\n'
        + '[[runs]]\nname = "tiny"\nbase = "tiny.toml"\n'
        + '[[runs]]\nname = "wild"\nbase = "wild.toml"\n'
        + f"[corpora]\nmarkov = {corpus(tmp_path / 'data', 'markov')}\n"
        + f"other = {corpus(other, 'other')}\n"
    )
    proc = run_here("hornn_dist.sweep", str(path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "runs"
    report = run_here("hornn_dist.report", str(out), "--no-plots")
    assert report.returncode == 0, report.stderr[-3000:]
    assert "different corpora" not in report.stderr  # a screen spans corpora on purpose
    markdown = (out / "report" / "report.md").read_text()
    for name in ("markov", "other"):
        heading = next(line for line in markdown.splitlines() if line.startswith(f"## {name} "))
        vocabulary = int(heading.split("vocabulary ")[1].rstrip(")").replace(",", ""))
        rows = {row["config"]: row for row in markdown_table(markdown, heading)}
        assert set(rows) == {"tiny", "wild"}
        assert sorted(rows[c]["rank"] for c in rows) == ["1", "2"]
        for row in rows.values():
            assert len(row["valid ppl by epoch"].split(", ")) == 2
            assert math.isfinite(float(row["test"])) and math.isfinite(float(row["best valid"]))
        wild_start = rows["wild"]["first window"]
        assert wild_start.startswith("**") and "(steps 1-2)" in wild_start
        assert float(wild_start.strip("*").split(" ")[0].replace(",", "")) > vocabulary
        assert not rows["tiny"]["first window"].startswith("**")
    assert (
        "did worse than a uniform guess over its corpus's vocabulary: markov.wild, other.wild"
        in (markdown)
    )

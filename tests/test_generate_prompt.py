"""generate's --prompt: read with the corpus's own text settings, unknown words named on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from hornn_dist.generate import unknown_words_warning
from tests.train_helpers import check_ok, run_module, write_tiny_config


@pytest.fixture(scope="module")
def lowercase_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lowercase")
    # trained (and evaluated) under bf16 where there is CUDA; generate samples in fp32
    config = write_tiny_config(folder, data={"lowercase": True}, train={"mixed_precision": "bf16"})
    check_ok(run_module("hornn_dist.train", str(config), "--set", "train.max_steps=4"))
    return folder / "run"


def _generate(run: Path, prompt: str):
    return run_module("hornn_dist.generate", str(run), "--prompt", prompt, "--tokens", "8",
                      "--seed", "5")  # fmt: skip


def test_prompt_is_lowercased_like_the_corpus_and_unknown_words_are_named(
    lowercase_run: Path,
) -> None:
    typed = _generate(lowercase_run, "W1 W2 Zzz")
    check_ok(typed)
    as_read = _generate(lowercase_run, "w1 w2 zzz")
    check_ok(as_read)
    # the capitalised words are the corpus's w1 and w2: the same sample follows
    assert typed.stdout.split()[3:] == as_read.stdout.split()[3:]
    assert typed.stdout.split()[:3] == ["W1", "W2", "Zzz"]
    warnings = [line for line in typed.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: --prompt words not in the vocabulary, read as <unk>: 'Zzz'"], (
        typed.stderr
    )
    known = _generate(lowercase_run, "W3 <unk> w4")
    check_ok(known)
    assert "warning:" not in known.stderr  # a literal <unk> is in the vocabulary


def test_generate_plans_and_logs_the_layers_for_the_fp32_it_samples_in(lowercase_run: Path) -> None:
    proc = _generate(lowercase_run, "w1 w2")
    check_ok(proc)
    [label] = [line for line in proc.stderr.splitlines() if "HORNN layers of" in line]
    assert label.endswith(": auto engine: fused, layers in fp32"), label


def test_the_warning_points_to_lowercase_words_of_a_cased_corpus() -> None:
    vocab = {"<unk>": 0, "<eos>": 1, "and": 2, "god": 3}
    assert unknown_words_warning(["And", "God", "Zion"], vocab) == (
        "warning: --prompt words not in the vocabulary, read as <unk>: 'And', 'God', 'Zion' "
        "(the vocabulary has them in lowercase: 'and', 'god')"
    )

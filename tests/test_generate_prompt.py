"""generate's --prompt: read with the corpus's own text settings, unknown words named on stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hornn_dist.generate import unknown_words_warning
from tests.train_helpers import REPO, check_ok, env, run_here, write_tiny_config


@pytest.fixture(scope="module")
def lowercase_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lowercase")
    # trained (and evaluated) under bf16 where there is CUDA; generate samples in fp32
    config = write_tiny_config(folder, data={"lowercase": True}, train={"mixed_precision": "bf16"})
    check_ok(run_here("hornn_dist.train", str(config), "--set", "train.max_steps=4"))
    return folder / "run"


def _generate(run: Path, prompt: str):
    return run_here("hornn_dist.generate", str(run), "--prompt", prompt, "--tokens", "8",
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


@pytest.mark.parametrize(
    ("start", "words", "printed"),
    [
        ("a", ["\n", "\n", "\n"], "a\n\n\n"),  # greedy's <eos> loop: three line ends, seen
        ("a", ["x", "\n", "y"], "a x\ny\n"),
        ("", ["\n", "x"], "\nx\n"),  # a drawn <eos> first: a line end first
        ("", [], "\n"),
    ],
)
def test_every_drawn_word_shows_a_drawn_eos_as_a_line_end(
    start: str, words: list[str], printed: str
) -> None:
    import io

    from hornn_dist.generate import print_words

    out = io.StringIO()
    print_words(iter(words), start, out)
    assert out.getvalue() == printed


# ---------------------------------------------------------------- the demo corpus's own reading

DEMO_SHRINK = ("train.max_steps=2", "model.hidden_size=8", "model.embedding_size=8",
               "train.eval_batch_size=40", "log.tensorboard=false")  # fmt: skip


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-step run of a tiny model on the bundled demo corpus (prepared in a temp cache)."""
    folder = tmp_path_factory.mktemp("demo_prompt")
    sets = [
        *DEMO_SHRINK,
        f"data.cache_dir={folder / 'cache'}",
        f"train.output_dir={folder / 'run'}",
    ]
    args = [arg for item in sets for arg in ("--set", item)]
    check_ok(run_here("hornn_dist.train", "configs/demo.toml", *args))
    return folder / "run"


def _continuation(proc, prompt: str) -> str:
    check_ok(proc)
    assert proc.stdout.startswith(prompt)
    return proc.stdout[len(prompt) :]


@pytest.mark.integration
def test_a_capitalised_punctuated_prompt_reads_as_its_lowercase_words(demo_run: Path) -> None:
    typed = "And God said unto Moses, Behold!"
    as_read = "and god said unto moses behold"
    runs = {
        prompt: run_here(
            "hornn_dist.generate",
            str(demo_run),
            "--prompt",
            prompt,
            "--tokens",
            "12",
            "--seed",
            "3",
        )  # fmt: skip
        for prompt in (typed, as_read)
    }
    assert _continuation(runs[typed], typed) == _continuation(runs[as_read], as_read)
    assert "warning:" not in runs[typed].stderr, runs[typed].stderr

    from hornn_dist.data.pipeline import corpus_folder
    from hornn_dist.data.shards import open_corpus
    from hornn_dist.run.checkpoint import read_config, resolve_checkpoint

    corpus = open_corpus(corpus_folder(read_config(resolve_checkpoint(str(demo_run))).data))
    encoded = corpus.tokenizer().encode("God's WORD: “Behold”, 3 times!")
    assert encoded.tokens == ["god", "'s", "word", "behold", "times"]
    assert 0 not in encoded.ids  # every one of them is a corpus word

    unknown = run_here("hornn_dist.generate", str(demo_run), "--prompt", "Behold, Zzyzx!",
                         "--tokens", "2", "--seed", "3")  # fmt: skip
    check_ok(unknown)
    warnings = [line for line in unknown.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: --prompt words not in the vocabulary, read as <unk>: 'Zzyzx'"]


@pytest.mark.integration
def test_temperature_zero_is_greedy_and_a_seed_repeats_the_text(demo_run: Path) -> None:
    def generate(*args: str):
        proc = run_here("hornn_dist.generate", str(demo_run), "--prompt", "and god",
                          "--tokens", "10", *args)  # fmt: skip
        check_ok(proc)
        return proc

    greedy = generate("--temperature", "0", "--seed", "1")
    assert greedy.stdout == generate("--top-k", "1", "--seed", "2").stdout
    assert generate("--seed", "7").stdout == generate("--seed", "7").stdout
    fresh = generate()
    seeds = [line.split()[1] for line in fresh.stderr.splitlines() if line.startswith("seed ")]
    assert len(seeds) == 1, fresh.stderr  # the drawn seed is printed ...
    assert generate("--seed", seeds[0]).stdout == fresh.stdout  # ... and samples it again


@pytest.mark.integration
def test_an_export_reads_prompts_the_same_through_transformers(
    demo_run: Path, tmp_path: Path
) -> None:
    from hornn_dist.data.shards import TOKENIZER

    out = tmp_path / "export"
    check_ok(run_here("hornn_dist.export", str(demo_run), str(out)))
    from tokenizers import Tokenizer

    prompt = "And God said unto Moses, Behold!"
    ids = Tokenizer.from_file(str(out / TOKENIZER)).encode(prompt).ids
    assert ids == Tokenizer.from_file(str(out / TOKENIZER)).encode(prompt.lower()[:-1]).ids
    transformers = pytest.importorskip(
        "transformers",
        reason="transformers is not installed (an optional reader, not a dependency)",
    )
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(out / TOKENIZER))
    assert fast(prompt)["input_ids"] == ids


def test_a_prompt_that_is_not_utf8_is_one_line(lowercase_run: Path) -> None:
    """A prompt typed in another encoding (the byte 0xff in `and\\xff god`) is one line naming
    the byte, where generate exited 1 with an 18-line traceback from the tokenizer."""
    proc = subprocess.run(
        [sys.executable, "-m", "hornn_dist.generate", str(lowercase_run), "--prompt",
         b"and\xff god", "--tokens", "4", "--seed", "5"],
        capture_output=True, text=True, cwd=REPO, env=env(), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: --prompt is not UTF-8 text: byte 0xff at character 4")

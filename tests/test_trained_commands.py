"""evaluate, generate and export on a saved checkpoint, in-process: what each says on a damaged
or diverged checkpoint, generate's prompt, seed, length and streaming, and export's folder."""

from __future__ import annotations

import json
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hornn_dist import evaluate, export, generate
from hornn_dist.config import RunConfig, load_config
from hornn_dist.models import build_model, plan_for
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.loading import open_prepared_corpus
from hornn_dist.run.run_state import TrainerState
from hornn_dist.runtime import build_accelerator, run_cli, setup_logging
from hornn_dist.util.files import new_folder_beside
from tests.train_helpers import REPO, write_tiny_config


def _save(cfg: RunConfig, step: int, fill: float | None = None) -> Path:
    """Write a checkpoint of an untrained model of `cfg` at `step` (its weights all `fill`
    when given) through the trainer's own save, without optimizer state (which evaluate,
    generate and export never read; building an optimizer first imports torch._dynamo, ~9 s);
    return its folder."""
    setup_logging(True)  # to this test's stderr: an earlier test's is closed
    acc = build_accelerator()
    corpus = open_prepared_corpus(cfg.data, acc)
    torch.manual_seed(step)
    model = build_model(cfg.model, corpus.vocab_size, plan_for(cfg.model, acc.device, 1, "no"))
    if fill is not None:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(fill)
    state = TrainerState(
        step=step,
        best_valid=3.7,
        best_checkpoint=ckpt.step_dir_name(step),
        vocab_hash=corpus.vocab_hash,
        corpus_hash=corpus.content_hash,
    )
    rank_state = {"stream": {}, "history": ()}
    return ckpt.save_checkpoint(acc, cfg.train.output_dir, state, rank_state, cfg, model)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with two checkpoints (steps 1 and 2) of a tiny model on a prepared corpus."""
    folder = tmp_path_factory.mktemp("trained")
    cfg = load_config(write_tiny_config(folder))
    _save(cfg, 1)
    _save(cfg, 2)
    return Path(cfg.train.output_dir)


def _cli(module, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run a command's main through run_cli; return its exit code, stdout and stderr."""
    with pytest.raises(SystemExit) as ended:
        run_cli(module.main, argv)
    out = capsys.readouterr()
    return int(ended.value.code), out.out, out.err


def _lines(err: str) -> list[str]:
    """Return stderr's lines less the INFO log lines."""
    return [line for line in err.splitlines() if " INFO " not in line]


# ---------------------------------------------------------------- damaged and diverged checkpoints


def test_a_damaged_checkpoint_points_to_the_runs_other_checkpoints_not_to_training_options(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = tmp_path / "run"
    shutil.copytree(run, damaged)
    newest = damaged / "checkpoints" / "step_00000002"
    weights = newest / ckpt.WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    commands = (
        (evaluate, [str(damaged)]),
        (generate, [str(damaged), "--tokens", "3", "--seed", "1"]),
        (export, [str(damaged), str(tmp_path / "model")]),
    )
    for module, argv in commands:
        code, out, err = _cli(module, argv, capsys)
        assert code == 2 and out == ""
        assert _lines(err) == [
            f"error: checkpoint {newest} is damaged: model.safetensors does not match its sha256 "
            f"in checksums.json (the file was damaged); pass another checkpoint of its run "
            f"(step_00000001 in {damaged / 'checkpoints'}), or train again"
        ], module.__name__
        assert "--resume" not in err and "--no-resume" not in err


def test_nan_weights_are_one_line_naming_the_checkpoint(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ckpt.read_config(run / "checkpoints" / "step_00000001")
    cfg.train.output_dir = str(run.with_name("diverged"))
    nan = _save(cfg, 5, fill=float("nan"))
    for module, argv in ((generate, [str(nan), "--tokens", "3"]), (evaluate, [str(nan)])):
        code, out, err = _cli(module, argv, capsys)
        assert code == 2 and out == ""
        assert len(_lines(err)) == 1, err
        [line] = _lines(err)
        assert line.startswith(f"error: checkpoint {nan} holds NaN or infinite weights (")
        assert line.endswith("): its run diverged before this save; use an earlier checkpoint")


# ---------------------------------------------------------------- generate


def test_a_prompt_with_no_known_word_says_the_text_does_not_follow_it(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(
        generate, [str(run), "--prompt", "zz qq", "--tokens", "3", "--seed", "1"], capsys
    )
    assert code == 0
    assert _lines(err) == [
        "warning: --prompt words not in the vocabulary, read as <unk>: 'zz', 'qq'",
        "warning: no word of --prompt is in the vocabulary: the text follows <unk> only, not "
        "the prompt",
    ]
    code, out, err = _cli(
        generate, [str(run), "--prompt", "  ", "--tokens", "3", "--seed", "1"], capsys
    )
    assert code == 0
    assert _lines(err) == [
        "warning: --prompt '  ' holds no word as the corpus reads text: the text starts as "
        "after a line end"
    ]


def test_greedy_sampling_prints_no_seed_and_says_a_seed_changes_nothing(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(run), "--prompt", "w1 w2", "--tokens", "6", "--temperature", "0"]
    code, first, err = _cli(generate, args, capsys)
    assert code == 0 and _lines(err) == []  # no "seed N (...)": none is drawn
    code, again, err = _cli(generate, [*args, "--seed", "7"], capsys)
    assert code == 0 and again == first
    assert _lines(err) == [
        "note: --seed does nothing here: --temperature 0 picks the likeliest word each time"
    ]
    code, _, err = _cli(generate, [str(run), "--tokens", "2"], capsys)
    assert code == 0 and _lines(err)[0].startswith("seed ")  # sampling still draws and prints one


def test_tokens_has_an_upper_bound(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(generate, [str(run), "--tokens", str(generate.MAX_TOKENS + 1)], capsys)
    assert code == 2 and out == ""
    assert err.strip() == (
        f"error: --tokens must be between 1 and {generate.MAX_TOKENS:,}, got "
        f"{generate.MAX_TOKENS + 1}"
    )


class _Counted(torch.nn.Module):
    """A model that counts its forward passes."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model, self.calls = model, 0

    def init_state(self, *args):
        return self.model.init_state(*args)

    def forward(self, *args):
        self.calls += 1
        return self.model(*args)


def test_words_are_sampled_lazily_and_printed_as_they_come(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ckpt.read_config(run / "checkpoints" / "step_00000002")
    model = _Counted(build_model(cfg.model, 41, plan_for(cfg.model, "cpu", 1, "no")).eval())
    words = generate.sample(
        model, [1], 5, 1.0, 0, torch.Generator().manual_seed(0), torch.device("cpu")
    )
    assert isinstance(next(words), int)
    assert model.calls == 1  # the prompt's pass alone: the next word is not computed yet
    assert len(list(words)) == 4 and model.calls == 5
    # the streamed text is the text decode gives for the same ids
    code, out, _ = _cli(
        generate, [str(run), "--prompt", "w1", "--tokens", "30", "--seed", "3"], capsys
    )
    assert code == 0
    acc = build_accelerator()
    corpus = open_prepared_corpus(cfg.data, acc, splits=())
    ids = list(generate.sample(
        generate.load_model_for(run / "checkpoints" / "step_00000002", cfg, corpus, acc, 1),
        corpus.tokenizer().encode("w1").ids, 30, 0.8, 40, torch.Generator().manual_seed(3), acc.device,
    ))  # fmt: skip
    expected = ("w1 " + corpus.decode(ids)).strip()
    assert [line.rstrip() for line in out.splitlines()] == expected.splitlines()


# ---------------------------------------------------------------- export


def _left_by_a_killed_process(out: Path) -> Path:
    """Return the temporary folder for `out` that a process, gone now, made and left behind
    (what an export killed by kill -9 leaves)."""
    code = "import sys; from pathlib import Path; from hornn_dist.util.files import new_folder_beside; "
    code += "print(new_folder_beside(Path(sys.argv[1])))"
    made = subprocess.run(
        [sys.executable, "-c", code, str(out)], capture_output=True, text=True, cwd=REPO, check=True
    )
    return Path(made.stdout.strip())


def test_export_removes_its_stale_temporary_folders_of_this_host_only(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model"
    stale = _left_by_a_killed_process(out)
    alive = new_folder_beside(out)  # an export still running: this process's
    other = tmp_path / stale.name.replace(socket.gethostname(), "another-host")
    other.mkdir()  # another host's: its process cannot be looked up from here
    for folder in (stale, alive, other):
        (folder / ckpt.WEIGHTS).write_bytes(b"\0" * 64)
    code, _, err = _cli(export, [str(run), str(out)], capsys)
    assert code == 0, err
    assert not stale.exists() and alive.is_dir() and other.is_dir()
    assert "removed a stale temporary export folder" in err


def test_every_exported_file_has_the_same_mode(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model"
    assert _cli(export, [str(run), str(out)], capsys)[0] == 0
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert len(set(modes.values())) == 1, modes


def test_a_long_export_name_exports(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / ("m" * 250)  # its hidden temporary name beside it must fit too
    code, _, err = _cli(export, [str(run), str(out)], capsys)
    assert code == 0, err
    assert (out / ckpt.WEIGHTS).is_file()
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_the_exported_tokenizer_names_its_unknown_and_end_tokens(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "model"
    assert _cli(export, [str(run), str(out)], capsys)[0] == 0
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(str(out))
    assert (tokenizer.unk_token, tokenizer.unk_token_id) == ("<unk>", 0)
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<eos>", 1)
    assert tokenizer("w1 zzz").input_ids[1] == 0
    listed = json.loads((out / "checksums.json").read_text())
    assert "tokenizer_config.json" in listed

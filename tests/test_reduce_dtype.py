"""train.reduce_dtype = "bf16" end to end: two real ranks train like fp32 on the bundled corpus,
and a resumed run repeats the straight one's steps bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hornn_dist.run.checkpoint import list_checkpoints
from hornn_dist.run.run_state import TrainerState
from tests.train_helpers import (
    REPO,
    check_ok,
    final_weights,
    launch_two_ranks,
    run_here,
    write_tiny_config,
)

# real 2-process training runs
pytestmark = pytest.mark.integration

BF16 = ("--set", 'train.reduce_dtype="bf16"')
# The demo config made cheap enough for a test: the whole bundled corpus, 2 epochs, a 16-unit
# FOFE HORNN-3, words seen fewer than 200 times as <unk> (vocabulary 397), 512 streams.
SMALL_DEMO = [
    "--set", "model.hidden_size=16", "--set", "model.embedding_size=16",
    "--set", "data.min_count=200", "--set", "train.batch_size=512",
    "--set", "train.eval_batch_size=512", "--set", "train.checkpoint_every=0",
    "--set", "log.every=100", "--set", "log.progress=false", "--set", "log.tensorboard=false",
]  # fmt: skip


def _valid_ppl(run: Path) -> float:
    """Return the last validation perplexity of a finished run."""
    return TrainerState.read(list_checkpoints(run)[-1]).valid_history[-1]["ppl"]


def test_bf16_exchange_trains_like_fp32_on_the_bundled_corpus(tmp_path: Path) -> None:
    demo = [str(REPO / "configs" / "demo.toml"), *SMALL_DEMO]
    demo += ["--set", f"data.cache_dir={tmp_path / 'cache'}"]
    check_ok(run_here("hornn_dist.prepare", *demo[:1], "--set", "data.min_count=200",
                      "--set", f"data.cache_dir={tmp_path / 'cache'}"))  # fmt: skip
    ppl = {}
    for dtype in ("fp32", "bf16"):
        out = tmp_path / dtype
        run = launch_two_ranks(
            "hornn_dist.train", *demo, "--set", f"train.output_dir={out}",
            "--set", f'train.reduce_dtype="{dtype}"',
        )  # fmt: skip
        check_ok(run)
        assert f"after it ({dtype})" in run.stderr  # the start-up line names the dtype
        assert TrainerState.read(list_checkpoints(out)[-1]).epoch == 2
        ppl[dtype] = _valid_ppl(out)
    print(f"valid ppl after 2 epochs: {ppl}")  # shown with pytest -s
    assert ppl["bf16"] == pytest.approx(ppl["fp32"], rel=0.01), ppl


def test_bf16_exchange_resumes_bit_for_bit(tmp_path: Path) -> None:
    config = write_tiny_config(tmp_path)
    check_ok(run_here("hornn_dist.prepare", str(config)))

    def train(name: str, steps: int) -> None:
        out = f"train.output_dir={tmp_path / name}"
        args = [str(config), *BF16, "--set", out, "--set", f"train.max_steps={steps}"]
        check_ok(launch_two_ranks("hornn_dist.train", *args))

    train("straight", 30)
    train("resumed", 7)  # stops mid-epoch 0
    train("resumed", 30)  # resumes, crosses two epoch ends
    straight, resumed = final_weights(tmp_path / "straight"), final_weights(tmp_path / "resumed")
    assert straight.keys() == resumed.keys()
    for key in straight:
        assert torch.equal(straight[key], resumed[key]), key

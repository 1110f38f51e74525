"""Damaged checkpoints are never used, one run per folder, a full disk is one line: real runs."""

from __future__ import annotations

import json
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hornn_dist.models.precision import cpu_bf16_flags
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.run_layout import CONFIG_FILE
from hornn_dist.util.errors import CheckpointError
from tests.train_helpers import (
    check_ok,
    final_weights,
    launch_two_ranks,
    prepared_tiny,
    read_until,
    run_here,
    run_patched,
    start,
    train_into,
    write_tiny_config,
)

STEPS = 12  # checkpoints every 5 steps and at the end


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_tiny(
        tmp_path_factory.mktemp("integrity"), train={"keep_checkpoints": 5, "epochs": 100}
    )


@pytest.fixture(scope="module")
def straight(workdir: Path) -> Path:
    out = workdir / "straight"
    check_ok(train_into(workdir, out, "--set", f"train.max_steps={STEPS}"))
    return out


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """Return the `error:` lines a CLI printed."""
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def stopped(workdir: Path) -> dict[int, Path]:
    """Runs stopped after 5 and 10 steps (checkpoints at 5, and 5 and 10), trained once."""
    runs = {}
    for steps in (5, 10):
        runs[steps] = workdir / f"stopped{steps}"
        check_ok(train_into(workdir, runs[steps], "--set", f"train.max_steps={steps}"))
    return runs


def copy_run(stopped: dict[int, Path], name: str, steps: int = 10) -> Path:
    """Return a fresh copy of the run stopped after `steps` steps."""
    out = stopped[steps].parent / name
    shutil.copytree(stopped[steps], out)
    return out


def step_dir(run: Path, step: int) -> Path:
    return ckpt.checkpoint_root(run) / ckpt.step_dir_name(step)


def xor_bytes(path: Path, offset: int, count: int = 64) -> None:
    data = bytearray(path.read_bytes())
    for i in range(offset, min(offset + count, len(data))):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage", ["xor_weights", "truncate_weights", "delete_weights", "truncate_optimizer"]
)
def test_resume_skips_a_damaged_newest_checkpoint(
    stopped: dict[int, Path], workdir: Path, straight: Path, damage: str
) -> None:
    run = copy_run(stopped, f"damaged_{damage}")
    newest = step_dir(run, 10)
    weights, optimizer = newest / ckpt.WEIGHTS, newest / "optimizer.bin"
    if damage == "xor_weights":
        xor_bytes(weights, weights.stat().st_size // 2)
    elif damage == "truncate_weights":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "delete_weights":
        weights.unlink()
    else:
        optimizer.write_bytes(optimizer.read_bytes()[:100])
    proc = train_into(workdir, run, "--set", f"train.max_steps={STEPS}")
    check_ok(proc)
    assert "step_00000010" in proc.stderr and "step_00000005" in proc.stderr
    assert "resuming from" in proc.stderr
    # resumed from step 5, exactly: the run ends as an uninterrupted one does
    got, want = final_weights(run), final_weights(straight)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_resume_of_a_named_damaged_checkpoint_is_one_line(
    stopped: dict[int, Path], workdir: Path
) -> None:
    run = copy_run(stopped, "named")
    weights = step_dir(run, 10) / ckpt.WEIGHTS
    xor_bytes(weights, weights.stat().st_size // 2)
    proc = train_into(workdir, run, "--resume", str(step_dir(run, 10)))
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "damaged" in line and "model.safetensors" in line and "sha256" in line
    assert "Traceback" not in proc.stderr


def test_no_checkpoint_verifies_is_one_line(stopped: dict[int, Path], workdir: Path) -> None:
    run = copy_run(stopped, "all_bad", steps=5)
    weights = step_dir(run, 5) / ckpt.WEIGHTS
    xor_bytes(weights, 200)
    proc = train_into(workdir, run)
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "no checkpoint" in line and "verifies" in line and "--no-resume" in line


def test_every_checkpoint_cut_short_is_one_line_and_touches_nothing(
    stopped: dict[int, Path], workdir: Path
) -> None:
    """rank_0.pt cut by 10 bytes in every checkpoint: each is incomplete (its size is not the
    listed one), so none can be resumed; the run stops in one line naming them, where it
    once warned and started a fresh run over them."""
    run = copy_run(stopped, "all_cut")
    for step in (5, 10):
        rank_file = step_dir(run, step) / "rank_0.pt"
        rank_file.write_bytes(rank_file.read_bytes()[:-10])
    before = {k: v for k, v in files_of(run).items() if k != ".lock"}
    proc = train_into(workdir, run, "--set", f"train.max_steps={STEPS}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert "step_00000005" in line and "step_00000010" in line and "rank_0.pt" in line
    assert "--no-resume" in line and "fresh run" not in proc.stderr
    assert {k: v for k, v in files_of(run).items() if k != ".lock"} == before


class _Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


@pytest.mark.parametrize("target", ["rank_0.pt", "optimizer.bin"])
def test_a_tampered_pickle_is_refused_without_unsafe_advice(
    stopped: dict[int, Path], workdir: Path, target: str
) -> None:
    run = copy_run(stopped, f"tampered_{target}")
    newest = step_dir(run, 10)
    (newest / target).write_bytes(pickle.dumps(_Evil()))
    ckpt.write_checksums(newest)  # listed as it is now: the loader itself must refuse it
    proc = train_into(workdir, run, "--set", f"train.max_steps={STEPS}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert target in line or str(newest) in line
    assert "not a valid checkpoint file" in line
    assert "weights_only" not in proc.stderr and "this must never run" not in proc.stdout


def test_a_folder_holding_only_done_is_not_a_checkpoint(tmp_path: Path) -> None:
    folder = step_dir(tmp_path, 3)
    folder.mkdir(parents=True)
    (folder / ckpt.DONE).write_text("step 3\n")
    assert ckpt.list_checkpoints(tmp_path) == []
    with pytest.raises(CheckpointError, match="incomplete: checksums.json, the list of its"):
        ckpt.resolve_checkpoint(folder)


def test_best_checkpoint_must_be_a_step_folder_of_the_run(
    stopped: dict[int, Path], workdir: Path
) -> None:
    run = copy_run(stopped, "best_outside")
    newest = step_dir(run, 10)
    state = json.loads((newest / ckpt.STATE_FILE).read_text())
    state["best_checkpoint"] = "../../straight/checkpoints/step_00000012"
    (newest / ckpt.STATE_FILE).write_text(json.dumps(state))
    ckpt.write_checksums(newest)
    with pytest.raises(CheckpointError, match='trainer_state.json: field "best_checkpoint"'):
        ckpt.resolve_checkpoint(run / "checkpoints" / "best")


@pytest.mark.integration
def test_a_second_run_into_the_same_folder_is_refused(workdir: Path) -> None:
    out = workdir / "locked"
    args = [str(workdir / "config.toml"), "--set", f"train.output_dir={out}"]
    first = start(
        [sys.executable, "-m", "hornn_dist.train", *args, "--set", "train.checkpoint_every=0"]
    )
    try:
        read_until(first, "step 4: loss")
        second = run_here("hornn_dist.train", *args)
        assert second.returncode == 2
        (line,) = error_lines(second)
        assert f"PID {first.pid}" in line and "in use by another run" in line
        assert "train.output_dir" in line
    finally:
        first.terminate()
        first.communicate(timeout=120)
    assert first.returncode == 0
    # the lock file stays behind, unlocked: the next run takes it
    assert (out / ".lock").is_file()
    check_ok(train_into(workdir, out, "--set", "train.max_steps=2", "--no-resume"))


def test_leftovers_of_a_killed_save_are_removed_at_start(
    stopped: dict[int, Path], workdir: Path
) -> None:
    run = copy_run(stopped, "leftovers", steps=5)
    stale = ckpt.checkpoint_root(run) / ".tmp_step_00000099"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"x" * 1000)
    proc = train_into(workdir, run, "--set", "train.max_steps=6")
    check_ok(proc)
    assert not stale.exists() and "left by a save that did not finish" in proc.stderr


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MiB tmpfs (needs root and mount rights; skipped where they are missing)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_is_one_line_and_leaves_no_partial_save(
    workdir: Path, small_disk: Path
) -> None:
    out = small_disk / "run"
    big = ["--set", "model.hidden_size=200", "--set", "model.embedding_size=200"]
    proc = train_into(
        workdir, out, "--set", "train.max_steps=5", "--set", "log.tensorboard=false", *big
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert "no space left on the device of" in line and "train.output_dir" in line
    assert "Traceback" not in proc.stderr
    assert not list(ckpt.checkpoint_root(out).glob(".tmp_step_*"))


def test_evaluate_prepares_nothing_from_a_checkpoints_paths(
    workdir: Path, stopped: dict[int, Path], tmp_path: Path
) -> None:
    run = copy_run(stopped, "foreign_paths")
    newest = step_dir(run, 10)
    secret, elsewhere = tmp_path / "secret.txt", tmp_path / "elsewhere"
    secret.write_text("not for training\n")
    text = (newest / CONFIG_FILE).read_text()
    text = text.replace(str(workdir / "train.txt"), str(secret))
    text = text.replace(str(workdir / "cache"), str(elsewhere))
    (newest / CONFIG_FILE).write_text(text)
    ckpt.write_checksums(newest)
    proc = run_here("hornn_dist.evaluate", str(run), "--split", "valid")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert "prepared corpus is not at" in line and "hornn_dist.prepare" in line
    assert not elsewhere.exists()


def test_evaluate_refuses_damaged_weights_in_one_line(stopped: dict[int, Path]) -> None:
    run = copy_run(stopped, "eval_damaged")
    weights = step_dir(run, 10) / ckpt.WEIGHTS
    xor_bytes(weights, weights.stat().st_size // 2)
    proc = run_here("hornn_dist.evaluate", str(run), "--split", "valid")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "model.safetensors" in line and "damaged" in line


@pytest.mark.parametrize("best", ["best", "latest-best"])
def test_a_damaged_best_checkpoint_is_said_never_replaced(
    stopped: dict[int, Path], best: str
) -> None:
    """The best by validation (step 10, the newest) truncated: `RUN/checkpoints/best` stops
    naming it and the others, where it once scored step 5 as "best" with a warning."""
    run = copy_run(stopped, f"damaged_best_{best}")
    newest = step_dir(run, 10)
    assert json.loads((newest / ckpt.STATE_FILE).read_text())["best_checkpoint"] == newest.name
    weights = newest / ckpt.WEIGHTS
    if best == "best":
        weights.write_bytes(weights.read_bytes()[:100])  # its record readable, its weights not
    else:
        (newest / ckpt.STATE_FILE).write_text("{")  # neither: which one is best is unknown
    proc = run_here("hornn_dist.evaluate", str(run / "checkpoints" / "best"), "--split", "valid")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    if best == "best":
        assert f"the best checkpoint {newest} is damaged: model.safetensors" in line
        assert "step_00000005 in" in line
    else:
        assert f"the newest checkpoint {newest} is damaged" in line and "is unknown" in line
        assert str(step_dir(run, 5)) in line
    assert "using the newest checkpoint" not in proc.stderr and "test:" not in proc.stdout


@pytest.mark.parametrize("edit", ["pooling", "hidden_size", "unrecorded"], ids=lambda e: e)
def test_an_edited_model_in_a_checkpoints_config_is_refused(
    stopped: dict[int, Path], workdir: Path, edit: str
) -> None:
    """config.toml's [model] edited after the save (checksums rewritten): evaluate and resume
    name the config and the values, where `max` once scored `gated`'s weights silently;
    weights that record no model are refused, naming the file."""
    from safetensors.torch import load_file, save_file

    run = copy_run(stopped, f"edited_{edit}")
    newest = step_dir(run, 10)
    config = newest / CONFIG_FILE
    text = config.read_text()
    if edit == "pooling":
        text = text.replace('pooling = "gated"', 'pooling = "max"')
    else:
        text = text.replace("hidden_size = 12", "hidden_size = 14")
    assert text != config.read_text()
    config.write_text(text)
    if edit == "unrecorded":  # weights that record no model: refused whatever the config says
        weights = newest / ckpt.WEIGHTS
        save_file(load_file(str(weights)), str(weights), metadata={"format": "pt"})
    ckpt.write_checksums(newest)
    proc = run_here("hornn_dist.evaluate", str(newest), "--split", "valid")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    if edit == "pooling":
        said = "model.pooling = 'max' there, 'gated' when the weights were written"
    elif edit == "hidden_size":
        said = "model.hidden_size = 14 there, 12 when the weights were written"
    else:
        said = f"{newest / ckpt.WEIGHTS} records no model (its '{ckpt.MODEL_RECORD}' metadata)"
    assert said in line and "not a valid weights file" not in line
    if edit == "pooling":
        resumed = train_into(workdir, run, "--set", f"train.max_steps={STEPS}")
        assert resumed.returncode == 2 and said in resumed.stderr, resumed.stderr[-2000:]


def test_resume_refuses_nan_in_the_optimizer_state(stopped: dict[int, Path], workdir: Path) -> None:
    """A momentum buffer of NaN (intact files, valid checksums) is refused at resume, naming
    the file, where it once failed later as a loss that "became NaN ... Lower optim.lr"."""
    run = copy_run(stopped, "nan_momentum")
    newest = step_dir(run, 10)
    optimizer = torch.load(newest / "optimizer.bin", weights_only=True)
    buffers = [v["momentum_buffer"] for v in optimizer["state"].values()]
    buffers[0].fill_(float("nan"))
    torch.save(optimizer, newest / "optimizer.bin")
    ckpt.write_checksums(newest)
    proc = train_into(workdir, run, "--set", f"train.max_steps={STEPS}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert f"checkpoint {newest} holds NaN or infinite optimizer state" in line
    assert "Lower optim.lr" not in proc.stderr and "--resume" in line


def test_resume_refuses_nan_weights_and_names_the_last_good_checkpoint(
    stopped: dict[int, Path], workdir: Path
) -> None:
    """A checkpoint saved with NaN weights (intact files, valid checksums) is refused as
    evaluate refuses it, naming the newest earlier checkpoint whose weights are finite."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    run = copy_run(stopped, "nan_weights")
    newest = step_dir(run, 10)
    weights = load_file(str(newest / ckpt.WEIGHTS))
    name = sorted(weights)[0]
    weights[name] = torch.full_like(weights[name], float("nan"))
    with safe_open(str(newest / ckpt.WEIGHTS), framework="pt") as saved:
        metadata = saved.metadata()
    save_file(weights, str(newest / ckpt.WEIGHTS), metadata=metadata)
    ckpt.write_checksums(newest)  # as a run that diverged before its save writes them
    assert ckpt.problem_with(newest, deep=True) is None
    proc = train_into(workdir, run, "--set", f"train.max_steps={STEPS}")
    assert proc.returncode != 0, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    good = step_dir(run, 5)
    assert f"checkpoint {newest} holds NaN or infinite weights" in line
    assert f"--resume {good}" in line and "Lower optim.lr" not in proc.stderr
    evaluate = run_here("hornn_dist.evaluate", str(newest), "--split", "valid")
    assert evaluate.returncode != 0 and "holds NaN or infinite weights" in evaluate.stderr


def files_of(run: Path) -> dict[str, bytes]:
    """Return every file of a run folder by relative path, with its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["checkpoint", "inside", "link", "checkpoints"])
def test_an_output_dir_in_another_runs_checkpoints_is_refused(
    stopped: dict[int, Path], workdir: Path, tmp_path: Path, where: str
) -> None:
    """train.output_dir pointed at another run's checkpoint (or inside one, through a link, or
    at its checkpoints/ folder) is one line and leaves that run as it was: a run there wrote
    its config.toml over the checkpoint's, and the next run of the host started over."""
    run = copy_run(stopped, f"host_{where}")
    newest = step_dir(run, 10)
    before = files_of(run)
    out = {
        "checkpoint": newest,
        "inside": newest / "sub",
        "link": tmp_path / "link",
        "checkpoints": ckpt.checkpoint_root(run),
    }[where]
    if where == "link":
        out.symlink_to(newest)
    proc = train_into(workdir, out, "--set", "train.max_steps=2")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    holder = ckpt.checkpoint_root(run) if where == "checkpoints" else newest
    assert f"train.output_dir {out} " in line and str(holder) in line
    assert "Traceback" not in proc.stderr
    assert files_of(run) == before and not (newest / "sub").exists()
    # the host run still resumes from its newest checkpoint
    resumed = train_into(workdir, run, "--set", f"train.max_steps={STEPS}")
    check_ok(resumed)
    assert f"resuming from {newest}" in resumed.stderr


# `python -c KILL_AT_RESAVE_RENAME WHEN CONFIG ...` trains, then SIGKILLs itself at the rename
# that puts the second save of step 10 (its test score recorded) in place: WHEN "before" the
# rename, or "after" it
KILL_AT_RESAVE_RENAME = """
import os, signal, sys
from hornn_dist import train
from hornn_dist.runtime import run_cli

when, real_replace, renames = sys.argv.pop(1), os.replace, []
def replace_and_die(src, dst):
    if os.path.basename(src) == ".tmp_step_00000010":
        renames.append(src)
    if len(renames) == 2 and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)
    if len(renames) == 2 and when == "after":
        os.kill(os.getpid(), signal.SIGKILL)
os.replace = replace_and_die
run_cli(train.main, sys.argv[1:])
"""


@pytest.mark.integration
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_at_the_rename_of_a_step_saved_again_loses_nothing(
    stopped: dict[int, Path], workdir: Path, when: str
) -> None:
    """Step 10 is saved twice (the second time with its test score): a kill at the rename
    that puts the second save in place leaves a complete checkpoint of step 10, which the next
    run puts back and finds complete, where the old save was deleted before the rename and the
    next run went back to step 5."""
    run = workdir / f"kill_at_rename_{when}"
    args = [str(workdir / "config.toml"), "--set", f"train.output_dir={run}"]
    args += ["--set", "train.max_steps=10"]
    killed = run_patched(KILL_AT_RESAVE_RENAME, when, *args)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    again = train_into(workdir, run, "--set", "train.max_steps=10")
    check_ok(again)
    assert "is complete at step 10" in again.stderr and "resuming from" not in again.stderr
    if when == "before":
        assert "recovered " + str(step_dir(run, 10)) in again.stderr
    root = ckpt.checkpoint_root(run)
    assert sorted(p.name for p in root.iterdir()) == ["step_00000005", "step_00000010"]
    assert ckpt.problem_with(step_dir(run, 10), deep=True) is None
    # the checkpoint an uninterrupted run ends with: the same weights and test score
    got, want = final_weights(run), final_weights(stopped[10])
    assert all(torch.equal(got[k], want[k]) for k in want)
    recorded = json.loads((step_dir(run, 10) / ckpt.STATE_FILE).read_text())["test"]
    assert recorded == json.loads((step_dir(stopped[10], 10) / ckpt.STATE_FILE).read_text())["test"]


def test_a_resume_of_another_runs_checkpoint_keeps_its_best_to_its_own(
    stopped: dict[int, Path], workdir: Path
) -> None:
    """--resume of another run's checkpoint into a new folder: the new run's best by validation
    names its own checkpoints, so its test score and `evaluate NEW/checkpoints/best` read a
    folder it has, where they read NEW/checkpoints/step_00000010 (the old run's best) and failed
    whenever the new run did not beat it (here an lr of 5 makes it worse)."""
    source, new = step_dir(stopped[10], 10), workdir / "resumed_elsewhere"
    before = files_of(stopped[10])
    assert json.loads((source / ckpt.STATE_FILE).read_text())["best_checkpoint"] == source.name
    proc = train_into(
        workdir, new, "--resume", str(source), "--set", "train.max_steps=12", "--set", "optim.lr=5"
    )
    check_ok(proc)
    newest = ckpt.list_checkpoints(new)[-1]
    state = json.loads((newest / ckpt.STATE_FILE).read_text())
    assert state["best_checkpoint"] == state["test_checkpoint"] == newest.name == "step_00000012"
    scored = run_here("hornn_dist.evaluate", str(new / "checkpoints" / "best"), "--split", "test")
    check_ok(scored)
    assert files_of(stopped[10]) == before


@pytest.fixture(scope="module")
def few_words(workdir: Path) -> Path:
    """The tiny config over a training text of six words (a vocabulary of 8 with <unk> and
    <eos>, where the tiny corpus has 41), prepared."""
    folder = workdir / "few_words"
    write_tiny_config(folder)
    (folder / "train.txt").write_text("a b c d e f\n" * 60)
    check_ok(run_here("hornn_dist.prepare", str(folder / "config.toml")))
    return folder


def test_another_vocabulary_is_told_by_its_size_and_the_fix_fits_the_command(
    stopped: dict[int, Path], workdir: Path, few_words: Path
) -> None:
    """A resume onto another vocabulary names the two sizes (it named two hashes), and
    advises --no-resume only where --resume was not given."""
    run = copy_run(stopped, "other_vocabulary")
    (line,) = error_lines(train_into(few_words, run))
    assert "vocabulary: checkpoint 41 words != data 8 words" in line
    assert "(use --no-resume or another train.output_dir)" in line
    named = train_into(few_words, workdir / "named_other", "--resume", str(step_dir(run, 10)))
    assert named.returncode == 2, named.stderr[-2000:]
    (line,) = error_lines(named)
    assert "vocabulary: checkpoint 41 words != data 8 words" in line
    assert "--no-resume" not in line and "leave --resume out" in line


@pytest.mark.parametrize("steps", [5, 10])
def test_a_rank_file_lacking_a_part_names_what_to_resume_instead(
    stopped: dict[int, Path], workdir: Path, steps: int
) -> None:
    """rank_0.pt without its stream: the line names the run's older checkpoint to resume, or
    says it has none (it advised "an older one" to a run that had none)."""
    run = copy_run(stopped, f"no_stream_{steps}", steps=steps)
    newest = step_dir(run, steps)
    parts = torch.load(newest / "rank_0.pt", weights_only=True)
    del parts["stream"]
    torch.save(parts, newest / "rank_0.pt")
    ckpt.write_checksums(newest)
    proc = train_into(workdir, run, "--set", f"train.max_steps={STEPS}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = error_lines(proc)
    assert "a rank file lacks the part 'stream'" in line
    if steps == 5:
        assert line.endswith("its run has no older checkpoint: start over with --no-resume")
    else:
        assert line.endswith(
            f"resume from an older checkpoint of its run (--resume {step_dir(run, 5)})"
        )


NOT_IDENTICAL = "different rounding, so not bit-identical to an uninterrupted run"


def test_a_resume_with_the_same_setup_says_nothing_of_rounding(
    stopped: dict[int, Path], workdir: Path
) -> None:
    proc = train_into(
        workdir, copy_run(stopped, "same_setup", steps=5), "--set", "train.max_steps=7"
    )
    check_ok(proc)
    assert "resuming from" in proc.stderr and NOT_IDENTICAL not in proc.stderr


@pytest.mark.skipif(
    not cpu_bf16_flags() or torch.cuda.is_available(), reason="needs a CPU with bf16 instructions"
)
def test_a_resume_into_another_precision_says_it_is_not_bit_identical(
    stopped: dict[int, Path], workdir: Path
) -> None:
    """fp32 -> bf16 at a resume is named, with what it means, where it said nothing."""
    run = copy_run(stopped, "to_bf16", steps=5)
    proc = train_into(
        workdir, run, "--set", "train.max_steps=7", "--set", "train.mixed_precision=bf16"
    )
    check_ok(proc)
    (line,) = [line for line in proc.stderr.splitlines() if NOT_IDENTICAL in line]
    assert "mixed precision: no -> bf16 (train.mixed_precision 'no' -> 'bf16')" in line


@pytest.mark.integration
def test_a_resume_on_two_processes_says_it_is_not_bit_identical(
    stopped: dict[int, Path], workdir: Path
) -> None:
    """A 1-process checkpoint resumed by 2 ranks: the same data order, other sums; the resume
    names the change and what it means, where it said nothing."""
    run = copy_run(stopped, "to_two_ranks", steps=5)
    args = [str(workdir / "config.toml"), "--set", f"train.output_dir={run}"]
    proc = launch_two_ranks("hornn_dist.train", *args, "--set", "train.max_steps=7")
    check_ok(proc)
    (line,) = [line for line in proc.stderr.splitlines() if NOT_IDENTICAL in line]
    assert "processes: 1 -> 2 (the same data order; the gradients summed over the ranks" in line

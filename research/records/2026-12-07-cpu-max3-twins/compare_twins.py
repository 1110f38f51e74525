"""Compare the PTB rows' seed-1234 twins (same config and seed, recipe identical in epoch 1)
from their records' train.log lines: each logged training window's loss (4 decimals, as
logged), the first epoch's validation ppl, and whether the start-up line found amx_bf16.

Run from the repository root: python research/records/2026-12-07-cpu-max3-twins/compare_twins.py
A screen logs every 200 steps (a 200-step window's mean): it is compared with the mean of the
two 100-step windows of a run that logs every 100 (agreeing within 4-decimal rounding)."""

from __future__ import annotations

import re
from pathlib import Path

RECORDS = Path(__file__).resolve().parent.parent
FEEDBACK = "2026-11-30-cpu-ptb-feedback-scale/ptb_recipe_feedback_scale/"
FIXED = "2026-12-02-cpu-ptb-fixed-phase/ptb_recipe_fixed_phase/"
ALPHA = "2026-11-30-cpu-ptb-rnn-alpha/ptb_recipe_rnn_alpha/"
GROUPS = {
    "max-3": [
        FEEDBACK + "hornn3-max-tied-wd1e-05-c0.2-seed1234",
        FEEDBACK + "screen-hornn3-max-tied-wd1e-05-c0.2",
        FIXED + "hornn3-max-tied-wd1e-05-c0.2-fixed7-seed1234",
    ],
    "FOFE-3": [
        ALPHA + "hornn3-fofe-tied-wd1e-05-alpha0.2-seed1234",
        FIXED + "hornn3-fofe-tied-wd1e-05-alpha0.2-fixed7-seed1234",
    ],
    "gated-3": [
        FEEDBACK + "hornn3-gated-tied-wd1e-05-c0.2-seed1234",
        FEEDBACK + "screen-hornn3-gated-tied-wd1e-05-c0.2",
        FIXED + "hornn3-gated-tied-wd1e-05-c0.2-fixed7-seed1234",
    ],
    "sum-3": [
        FEEDBACK + "hornn3-sum-tied-wd1e-05-c0.2-seed1234",
        FEEDBACK + "screen-hornn3-sum-tied-wd1e-05-c0.2",
    ],
}
EPOCH = 1549  # PTB's steps per epoch at batch 20, bptt 30


def read(run: str) -> tuple[dict[int, str], str | None, bool | None]:
    """Return the run's epoch-1 training windows {step: loss}, epoch-1 validation ppl and
    whether its first start-up line names amx_bf16."""
    losses: dict[int, str] = {}
    valid, amx = None, None
    for line in (RECORDS / run / "train.log").read_text(encoding="utf-8").splitlines():
        if m := re.search(r"step (\d+): loss ([\d.]+)", line):
            if int(m.group(1)) <= EPOCH:
                losses.setdefault(int(m.group(1)), m.group(2))
        elif (
            m := re.search(rf"step {EPOCH}: valid loss [\d.]+, ppl ([\d.]+)", line)
        ) and not valid:
            valid = m.group(1)
        if amx is None and "this CPU has" in line:
            amx = "amx_bf16" in line
    return losses, valid, amx


def agree(a: dict[int, str], b: dict[int, str], step: int) -> bool | None:
    """Whether the two runs' windows ending at `step` agree (None: not both logged)."""
    if step not in a or step not in b:
        return None
    a_every, b_every = (200 if 100 not in x else 100 for x in (a, b))
    if a_every == b_every:
        return a[step] == b[step]
    x, y = (a, b) if a_every == 200 else (b, a)  # x logs every 200 steps, y every 100
    return abs((float(y[step]) + float(y[step - 100])) / 2 - float(x[step])) <= 0.00011


for group, runs in GROUPS.items():
    print(f"## {group}")
    data = {run: read(run) for run in runs}
    for run, (losses, valid, amx) in data.items():
        shown = " ".join(f"{s}:{losses.get(s, '-')}" for s in (100, 200, 300, 400, 800, 1200, 1500))
        print(f"  {run.split('/')[-1]}: amx_bf16 {amx}, epoch-1 valid {valid}; {shown}")
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            marks = {s: agree(data[a][0], data[b][0], s) for s in range(100, EPOCH + 1, 100)}
            known = [s for s, ok in marks.items() if ok is not None]
            differ = [s for s in known if not marks[s]]
            first = differ[0] if differ else "none"
            print(
                f"  {a.split('/')[-1]} vs {b.split('/')[-1]}: {len(known) - len(differ)} of"
                f" {len(known)} epoch-1 windows agree, first differing at step {first}"
            )

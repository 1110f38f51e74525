"""What TensorBoard shows of a run besides its scalars: the hyper-parameters and a custom-scalars layout.

Each start of a run writes into an event folder of its own, `output_dir/tensorboard/<start>/`
(its start time, `new_event_folder`), kept in the trainer state so that its resumes continue
it: a run started over (`--no-resume`, or one stopped before its first checkpoint) is another
run in `tensorboard --logdir runs/`, never new points drawn into the old run's lines. The
hyper-parameters and the layout go into that folder once, at the run's start (written at step
0, they survive the purge of a resume), so the HPARAMS tab shows one session per run start,
with every scalar of the run as a metric. Accelerate's `init_trackers(config=...)` would write
the hyper-parameters into a second, timestamp-named run instead.

The Custom Scalars tab opens on one category per layer with a chart per feedback path (and
per gate), its title naming the path: TensorBoard colours a chart's lines by run, not by tag,
so paths drawn on one chart differ only by marker shape. Then train, valid and test perplexity
on one chart, where the test score's single point shows as a marker (a chart of the Scalars
tab draws no line through one point). The Text tab holds the test result as a table
(`run/test`) and why training ended (`run/stop_reason`). A chart's tags are regexes; the same
charts from several runs merge into one chart with a line per run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PPL_CATEGORY = "perplexity"
PPL_CHART = "train, valid and test perplexity (test: the run's end, a marker)"


def new_event_folder(board: Path) -> str:
    """Return the name of a new run start's event folder in `board` (output_dir/tensorboard):
    the start time, with a count after it where a start in the same second took the name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name, n = stamp, 1
    while (board / name).exists():
        name, n = f"{stamp}-{n}", n + 1
    return name


def event_folders(board: Path) -> list[Path]:
    """Return the event folders in `board` (output_dir/tensorboard), one per run start, oldest
    first (by name: the start time); [board] itself where it holds the event files (a record's
    copy of a run written before the folders)."""
    if any(board.glob("events.out.tfevents.*")):
        return [board]
    return sorted(p for p in board.iterdir() if p.is_dir()) if board.is_dir() else []


def paths_category(layer: int) -> str:
    """Return the title of the category of one layer's feedback paths."""
    return f"layer {layer}: gradient norm per feedback path"


def path_chart(key: str) -> str:
    """Return the title of the chart of one feedback path ("layer{l}/path{n}" or
    "layer{l}/gate{n}"): ‖∂L/∂W_hn‖ of path n (eq. 2), or of gate n's weights (eq. 6-7)."""
    layer, name = key.split("/")
    kind, n = name.rstrip("0123456789"), name[len(name.rstrip("0123456789")) :]
    what = f"‖∂L/∂W_h{n}‖" if kind == "path" else f"‖∂L/∂(gate {n}'s weights)‖"
    return f"{layer.replace('layer', 'layer ')}, {kind} {n}: {what}"


def layout(path_keys: Iterable[str]) -> dict[str, dict[str, list[Any]]]:
    """Return the custom-scalars layout for a model whose feedback paths are `path_keys`
    ("layer{l}/path{n}", "layer{l}/gate{n}"): per layer, a chart per path, then each gate's;
    then train, valid and test ppl."""
    keys = sorted(path_keys, key=_path_order)
    categories: dict[str, dict[str, list[Any]]] = {}
    for key in keys:
        layer = int(key.split("/")[0].removeprefix("layer"))
        chart = ["Multiline", [rf"^grad_norm/{key}$"]]
        categories.setdefault(paths_category(layer), {})[path_chart(key)] = chart
    tags = ["^train/ppl$", "^valid/ppl$", "^test/ppl$"]
    categories[PPL_CATEGORY] = {PPL_CHART: ["Multiline", tags]}
    return categories


def _path_order(key: str) -> tuple[int, int, int]:
    layer, name = key.split("/")
    kind = name.rstrip("0123456789")
    return int(layer.removeprefix("layer")), kind == "gate", int(name[len(kind) :])


def test_table(checkpoint: str, valid_ppl: float, best: Any, last: Any, step: int) -> str:
    """Return the Text tab's table of a run's test result: the score (`.loss`, `.ppl`) of the
    best checkpoint by validation and of the last weights (after `step` steps)."""
    return "\n".join(
        [
            "| weights | test ppl | test loss |",
            "| --- | ---: | ---: |",
            f"| best by validation ({checkpoint}, valid ppl {valid_ppl:.2f}) | "
            f"**{best.ppl:.2f}** | {best.loss:.4f} |",
            f"| last (step {step}) | {last.ppl:.2f} | {last.loss:.4f} |",
        ]
    )


def describe_run(writer: Any, hparams: dict[str, Any], path_keys: Iterable[str]) -> None:
    """Write the run's hyper-parameters and its custom-scalars layout into `writer`'s own folder
    (a `torch.utils.tensorboard.SummaryWriter`); call once per run."""
    from tensorboard.plugins.hparams.summary_v2 import hparams_pb

    writer.file_writer.add_summary(hparams_pb(hparams))
    writer.add_custom_scalars(layout(path_keys))
    writer.flush()


def record_stop(writer: Any, reason: str, step: int) -> None:
    """Write why training ended into the TEXT tab (tag run/stop_reason) at its last step."""
    writer.add_text("run/stop_reason", reason, global_step=step)
    writer.flush()


def record_test(writer: Any, table: str, step: int) -> None:
    """Write the run's test result (`test_table`) into the TEXT tab (tag run/test)."""
    writer.add_text("run/test", table, global_step=step)
    writer.flush()

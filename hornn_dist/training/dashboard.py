"""What TensorBoard shows of a run besides its scalars: the hyper-parameters and a custom-scalars layout.

Each start of a run writes into an event folder of its own, `output_dir/tensorboard/<start>/`
(its start time, `new_event_folder`), kept in the trainer state so that its resumes continue
it: a run started over (`--no-resume`, or one stopped before its first checkpoint) is another
run in `tensorboard --logdir runs/`, never new points drawn into the old run's lines. The
hyper-parameters and the layout go into that folder once, at the run's start (written at step
0, they survive the purge of a resume), so the HPARAMS tab shows one session per run start,
with every scalar of the run as a metric. Accelerate's `init_trackers(config=...)` would write
the hyper-parameters into a second, timestamp-named run instead.

TensorBoard colours and names a chart's lines by run, not by tag: lines that one chart must
tell apart are each written to a run of their own (`Lines`: the sub-folders `train`, `valid`,
`test`, `path1`, ..., `gate1`, ... of the event folder, under one tag), so that they get a
colour each and the run list names them. The Custom Scalars tab opens on train, valid and test
loss on one chart (the loss, the log of the perplexity: a first window's perplexity of 76,067
would flatten every later value along the bottom; the test point is the best checkpoint's, at
its step), then one category per layer: every path's and gate's gradient norm on one chart,
then a chart per path and per gate, its title naming it. The Text tab holds the test result as
a table (`run/test`) and why training ended (`run/stop_reason`). A chart's tags are regexes;
the same charts from several runs merge into one chart with a line per run and series.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

LOSS_CATEGORY = "loss"
LOSS_CHART = "train, valid and test loss (log perplexity; test: the best checkpoint, a marker)"
LOSS_LINES = "lines/loss"  # the tag of the runs train, valid and test (`Lines`)


def path_lines(layer: int) -> str:
    """Return the tag of one layer's gradient norms in the runs path1, ..., gate1, ... (`Lines`)."""
    return f"lines/layer{layer}_grad_norm"


class Lines:
    """Series that one chart tells apart, each a TensorBoard run of its own: a sub-folder of
    the run's event folder (TensorBoard colours and names a chart's lines by run)."""

    def __init__(self, folder: Path, purge_step: int | None) -> None:
        """folder: the run's event folder; purge_step: a resume's first step (each series
        drops what an earlier run wrote from there on, as the run's own writer does)."""
        self.folder, self.purge_step = folder, purge_step
        self.writers: dict[str, Any] = {}

    def write(self, tag: str, values: dict[str, float], step: int) -> None:
        """Write each series' value (series name: value) under `tag` at `step`."""
        from torch.utils.tensorboard import SummaryWriter

        for series, value in values.items():
            writer = self.writers.get(series)
            if writer is None:
                folder = str(self.folder / series)
                writer = self.writers[series] = SummaryWriter(folder, purge_step=self.purge_step)
            writer.add_scalar(tag, value, global_step=step)
            writer.flush()

    def write_norms(self, norms: dict[str, float], step: int) -> None:
        """Write the gradient norm of every path and gate ("grad_norm/layer{l}/path{n}"), a
        series each, under its layer's tag."""
        for key, value in norms.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "grad_norm":
                layer = int(parts[1].removeprefix("layer"))
                self.write(path_lines(layer), {parts[2]: value}, step)

    def close(self) -> None:
        """Close every series' writer."""
        for writer in self.writers.values():
            writer.close()
        self.writers = {}


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
    first (by name: the start time)."""
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
    ("layer{l}/path{n}", "layer{l}/gate{n}"): train, valid and test loss on one chart; then per
    layer every path and gate on one chart, then a chart per path, then each gate's."""
    keys = sorted(path_keys, key=_path_order)
    categories: dict[str, dict[str, list[Any]]] = {
        LOSS_CATEGORY: {LOSS_CHART: ["Multiline", [f"^{LOSS_LINES}$"]]}
    }
    for key in keys:
        layer = int(key.split("/")[0].removeprefix("layer"))
        charts = categories.setdefault(paths_category(layer), {})
        if not charts:  # first, the layer's paths and gates told apart on one chart
            charts[layer_chart(layer)] = ["Multiline", [f"^{path_lines(layer)}$"]]
        charts[path_chart(key)] = ["Multiline", [rf"^grad_norm/{key}$"]]
    return categories


def layer_chart(layer: int) -> str:
    """Return the title of the chart of every feedback path and gate of one layer."""
    return f"layer {layer}: every path and gate (a line each, named in the run list)"


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

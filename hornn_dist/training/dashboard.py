"""What TensorBoard shows of a run besides its scalars: the hyper-parameters and a custom-scalars layout.

Both go into the run's own event files, once, at the start of a fresh run (written at step 0,
they survive the purge of a resume), so `tensorboard --logdir runs/` lists one run per
output_dir and its HPARAMS tab one session per run, with every scalar of the run as a metric.
Accelerate's `init_trackers(config=...)` would write the hyper-parameters into a second,
timestamp-named run instead.

The Custom Scalars tab opens on one chart per layer holding every feedback path's gradient
norm (and gate's), then train and valid perplexity on one chart. A chart's tags are regexes;
the same charts from several runs merge into one chart per layer with a line per run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

PATHS_CATEGORY = "gradient norm per feedback path"
PPL_CATEGORY = "perplexity"


def layer_chart(layer: int) -> str:
    """Return the title of the chart of one layer's feedback paths."""
    return f"layer {layer}: ‖∂L/∂W_hn‖ per path n (and gate n)"


def layout(path_keys: Iterable[str]) -> dict[str, dict[str, list[Any]]]:
    """Return the custom-scalars layout for a model whose feedback paths are `path_keys`
    ("layer{l}/path{n}", "layer{l}/gate{n}"): one chart per layer, then train and valid ppl."""
    layers = sorted({int(key.split("/")[0].removeprefix("layer")) for key in path_keys})
    paths = {
        layer_chart(layer): ["Multiline", [rf"^grad_norm/layer{layer}/(path|gate)\d+$"]]
        for layer in layers
    }
    ppl = {"train and valid perplexity": ["Multiline", ["^train/ppl$", "^valid/ppl$"]]}
    return {PATHS_CATEGORY: paths, PPL_CATEGORY: ppl}


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

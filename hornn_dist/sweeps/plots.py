"""PNG plots of a sweep's picked runs: test perplexity by order (Table 2), by α (Figure 4), and
each model's validation perplexity by epoch (its seeds as a mean and a band).

matplotlib is an optional dependency (`pip install -e ".[report]"`), imported inside the
functions. Figures are drawn on matplotlib's Agg canvas directly, without pyplot, so the
caller's own matplotlib backend is left as it was.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hornn_dist.models.poolings import get_pooling
from hornn_dist.sweeps.fair import seed_groups
from hornn_dist.sweeps.paper import (
    ALPHA_BEST,
    ALPHA_USED,
    PTB_BY_ORDER,
    SUMMARY,
    paper_column,
)
from hornn_dist.sweeps.results import RunRecord
from hornn_dist.sweeps.tables import order_cells, reads_alpha
from hornn_dist.util.errors import ConfigError
from hornn_dist.util.files import atomic_writer


def require_matplotlib() -> None:
    """Raise ConfigError (one line) when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError(
            'report\'s plots need matplotlib: pip install -e ".[report]" (or pass --no-plots)'
        ) from None


def _figure(panels: int = 1, width: float = 0.0) -> tuple[Any, list[Any]]:
    """Return a figure on the Agg canvas and its `panels` axes side by side (`width` inches
    wide, else 6 per panel)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width or 6 * panels, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, [fig.add_subplot(1, panels, i + 1) for i in range(panels)]


def _save(fig: Any, path: Path) -> None:
    """Write the figure as a PNG at `path`, atomically (never through a link there)."""
    with atomic_writer(path) as f:
        fig.savefig(f, format="png", dpi=110)


def draw_plots(picked: Sequence[RunRecord], out_dir: Path, paper: str) -> list[Path]:
    """Write every plot the picked runs support into `out_dir`; return the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in (
        ("orders.png", lambda p: plot_orders(picked, p, paper)),
        ("alpha.png", lambda p: plot_alpha(picked, p)),
        ("valid_curves.png", lambda p: plot_valid_curves(picked, p)),
    ):
        path = out_dir / name
        if draw(path):
            written.append(path)
        else:
            path.unlink(missing_ok=True)  # a previous report's plot the runs no longer support
    return written


def plot_orders(picked: Sequence[RunRecord], path: Path, paper: str) -> bool:
    """Draw test ppl against order, one line per pooling and the RNN at order 1 (beside the
    paper's Table 2 on PTB); return False, drawing nothing, without a HORNN of order ≥ 2."""
    points: dict[str, list[tuple[int, float]]] = {}
    for (pooling, order), runs in order_cells(picked).items():  # the runs Table 2 shows
        if math.isfinite(runs[0].test_ppl):
            points.setdefault(pooling, []).append((order, runs[0].test_ppl))
    if not any(xy for pooling, xy in points.items() if pooling):
        return False
    with_paper = paper == "ptb"
    fig, axes = _figure(2 if with_paper else 1)
    _order_lines(axes[0], points, "ours")
    if with_paper:
        table = {p: sorted(by_order.items()) for p, by_order in PTB_BY_ORDER.items()}
        _order_lines(axes[1], {"": [(1, SUMMARY["ptb"]["RNN"])], **table}, paper_column(paper))
    _save(fig, path)
    return True


def _order_lines(ax: Any, points: dict[str, list[tuple[int, float]]], title: str) -> None:
    """Draw one line per pooling, the RNN as a point at order 1 and a dotted level."""
    for pooling, xy in points.items():
        xy = sorted(xy)
        xs, ys = [x for x, _ in xy], [y for _, y in xy]
        if pooling:
            spec = get_pooling(pooling)
            ax.plot(xs, ys, "o-", color=spec.color, label=spec.label)
        else:
            ax.plot(xs, ys, "s", color="black", label="RNN (order 1)")
            ax.axhline(min(ys), color="black", linestyle=":", linewidth=1)
    ax.set_xticks(sorted({x for xy in points.values() for x, _ in xy}))
    ax.set_xlabel("order N")
    ax.set_ylabel("test perplexity")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def plot_alpha(picked: Sequence[RunRecord], path: Path) -> bool:
    """Draw test and valid ppl of the FOFE HORNNs against α (one pair of lines per order);
    return False, drawing nothing, with fewer than two α values."""
    by_order: dict[int, list[RunRecord]] = {}
    for record in picked:
        if reads_alpha(record):
            by_order.setdefault(record.config.model.order, []).append(record)
    alphas = {r.config.model.alpha for runs in by_order.values() for r in runs}
    if len(alphas) < 2:
        return False
    fig, (ax,) = _figure()
    ax.axvspan(*ALPHA_BEST, color="0.9", label="paper: best α range")
    ax.axvline(ALPHA_USED, color="0.5", linestyle=":", label=f"paper: α = {ALPHA_USED} used")
    for index, (order, runs) in enumerate(sorted(by_order.items())):
        runs = sorted(runs, key=lambda r: r.config.model.alpha)
        xs = [r.config.model.alpha for r in runs]
        color = f"C{index}"
        ax.plot(xs, [r.test_ppl for r in runs], "o-", color=color, label=f"order {order}: test")
        ax.plot(
            xs, [r.best_valid_ppl for r in runs], "s--", color=color, label=f"order {order}: valid"
        )
    ax.set_xlabel("forgetting factor α")
    ax.set_ylabel("perplexity")
    ax.set_title("FOFE HORNN by α")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, path)
    return True


@dataclass(frozen=True)
class ValidCurve:
    """One model's validation ppl by epoch: over its seeds, the mean of those that validated
    at each epoch and their least and greatest."""

    label: str
    seeds: int
    epochs: list[float]
    mean: list[float]
    low: list[float]
    high: list[float]


def valid_curves(picked: Sequence[RunRecord]) -> list[ValidCurve]:
    """Return one curve per model of the picked runs (its seeds together: runs whose configs
    differ only by the seed), in the order the models first appear; a model without a finite
    validation has none."""
    curves = []
    for label, runs in seed_groups(picked):
        by_epoch: dict[float, list[float]] = {}
        for record in runs:
            for h in record.valid_history:
                if math.isfinite(h.get("ppl", math.nan)):
                    by_epoch.setdefault(float(h["epoch"]), []).append(float(h["ppl"]))
        if not by_epoch:
            continue
        epochs = sorted(by_epoch)
        recipe = runs[0].recipe
        curves.append(
            ValidCurve(
                label=label + (f" ({recipe})" if recipe else ""),
                seeds=len(runs),
                epochs=epochs,
                mean=[statistics.fmean(by_epoch[e]) for e in epochs],
                low=[min(by_epoch[e]) for e in epochs],
                high=[max(by_epoch[e]) for e in epochs],
            )
        )
    return curves


LEGEND_ROWS = 22  # legend entries per column beside the axes (a 4.2-inch-high figure)


def plot_valid_curves(picked: Sequence[RunRecord], path: Path) -> bool:
    """Draw each model's validation ppl against epoch, a model's seeds as their mean within a
    band from least to greatest (log y when the range is wide), the legend beside the axes;
    return True (drawn for any runs)."""
    curves = valid_curves(picked)
    columns = max(1, math.ceil(len(curves) / LEGEND_ROWS))
    fig, (ax,) = _figure(width=6 + 3 * columns if curves else 6)
    if len(curves) > 10:  # matplotlib's default cycle repeats after ten colours
        from matplotlib import colormaps

        ax.set_prop_cycle(color=[colormaps["tab20"](i % 20) for i in range(len(curves))])
    for curve in curves:
        label = curve.label + (f" ({curve.seeds} seeds)" if curve.seeds > 1 else "")
        (line,) = ax.plot(curve.epochs, curve.mean, "o-", markersize=3, label=label)
        if curve.seeds > 1:
            ax.fill_between(curve.epochs, curve.low, curve.high, color=line.get_color(), alpha=0.2)
    values = [v for c in curves for v in c.low + c.high]
    if values and max(values) > 3 * min(values):
        ax.set_yscale("log")
    if not values:
        ax.text(0.5, 0.5, "no validation yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation perplexity")
    ax.set_title("validation perplexity of each model's kept runs")
    ax.grid(alpha=0.3)
    if curves:
        seeds = "seeds: mean, band min–max" if any(c.seeds > 1 for c in curves) else None
        fig.legend(loc="outside right upper", fontsize="small", ncols=columns, title=seeds)
    _save(fig, path)
    return True

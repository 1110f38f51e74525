"""Markdown table of a throughput.py JSON: best mode of each variant per config and precision.

    python benchmarks/markdown_table.py OUT/throughput.json   # gpu_check.sh's OUT

One row per variant, one column per (config, precision) in the order the JSON has them; a cell
is the variant's best tokens/s over its modes and its ratio to the best LSTM of that column
(the speed issue's baseline), in bold where it meets the issue's goal (1.0x; gated 0.8x). The
LSTM row gives its own tokens/s. A variant with only failed rows shows "failed". This is the
table a GPU record's README.md keeps, so a GPU run's numbers go there unedited.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

GOALS = {"gated": 0.8}  # the speed issue's goal per pooling; everything else 1.0


def best_rows(rows: list[dict]) -> dict[tuple[str, str, str], dict]:
    """Return the fastest successful row of each (variant, config, precision)."""
    best: dict[tuple[str, str, str], dict] = {}
    for r in rows:
        if "tokens_per_s" not in r:
            continue
        key = (r["variant"], r["config"], r["precision"])
        if key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]:
            best[key] = r
    return best


def cell(row: dict | None, failed: bool) -> str:
    """Return one table cell: 'tokens/s, ratio' (bold at the goal), the LSTM's own, or why not."""
    if row is None:
        return "failed" if failed else "–"
    speed = f"{row['tokens_per_s'] / 1000:.0f}K"
    if row.get("arch") == "lstm" or "ratio_to_best_lstm" not in row:
        return speed
    ratio = row["ratio_to_best_lstm"]
    text = f"{ratio:.2f}×"
    if row.get("arch") == "hornn" and ratio >= GOALS.get(row.get("pooling", ""), 1.0):
        text = f"**{text}**"
    return f"{speed}, {text}"


def markdown(data: dict) -> str:
    """Return the markdown table of one throughput.py JSON document."""
    rows = data["results"]
    columns = list(dict.fromkeys((r["config"], r["precision"]) for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    best = best_rows(rows)
    attempted = {(r["variant"], r["config"], r["precision"]) for r in rows}
    lines = [
        "| variant | " + " | ".join(f"{c} {p}" for c, p in columns) + " |",
        "| --- |" + " --- |" * len(columns),
    ]
    for v in variants:
        cells = [cell(best.get((v, c, p)), (v, c, p) in attempted) for c, p in columns]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    meta = data.get("meta", {})
    device = meta.get("device_name") or meta.get("device", "?")
    lines.append("")
    lines.append(f"{device}, torch {meta.get('torch', '?')}, {meta.get('date', '?')}: "
                 f"`{meta.get('command', '?')}`")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the markdown table of the JSON file given on the command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", type=Path, help="a JSON file written by benchmarks/throughput.py")
    args = p.parse_args(argv)
    try:
        data = json.loads(args.json.read_text())
        print(markdown(data))
    except (OSError, ValueError, KeyError) as err:
        print(f"markdown_table.py: cannot read {args.json}: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

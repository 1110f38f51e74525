"""Print each run of a checkout's configs/sweeps/transfer.toml as one JSON line (its name, and its
resolved [model], [optim], [train] without output_dir, and [data]), read by that checkout's own
code: run in two checkouts and compare, to check that a sweep file still trains what ran.

    python compare_screen.py CHECKOUT > runs.jsonl
"""

import json
import sys
from pathlib import Path

root = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(root))  # the checkout's own package, not the installed one
import hornn_dist  # noqa: E402

assert Path(hornn_dist.__file__).resolve().is_relative_to(root), hornn_dist.__file__
try:
    from hornn_dist.sweeps.sweep_file import read_sweep  # noqa: E402
except ImportError:  # before the sweep engine was renamed
    from hornn_dist.experiments.sweep_file import read_sweep  # noqa: E402

for run in read_sweep(root / "configs" / "sweeps" / "transfer.toml", ()).runs:
    resolved = run.config.to_dict()
    resolved["train"].pop("output_dir", None)
    sections = {k: resolved[k] for k in ("model", "optim", "train", "data")}
    print(json.dumps({"name": run.name, **sections}, sort_keys=True))

"""Print each transfer-sweep run's resolved config as JSON lines (name, model, optim, train, data)."""
import json, sys
from dataclasses import asdict
sys.path.insert(0, sys.argv[1])
import hornn_dist
assert hornn_dist.__file__.startswith(sys.argv[1]), hornn_dist.__file__
from pathlib import Path
try:
    from hornn_dist.sweeps.sweep_file import read_sweep
except ImportError:
    from hornn_dist.experiments.sweep_file import read_sweep
for run in read_sweep(Path(sys.argv[1]) / "configs/sweeps/transfer.toml", ()).runs:
    d = run.config.to_dict()
    d["train"].pop("output_dir", None)
    print(json.dumps({"name": run.name, **{k: d[k] for k in ("model", "optim", "train", "data")}}, sort_keys=True))

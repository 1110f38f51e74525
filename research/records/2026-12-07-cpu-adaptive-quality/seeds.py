"""PTB's RNN row over seeds 1234-1236: the full softmax (tied) against the adaptive softmax
untied and with a tied head, mean ± sd of best validation and test ppl, the gap, 2 x the larger
sd and Welch's p (hornn_dist.sweeps.welch), Holm's correction over the two comparisons.

    python research/records/2026-12-07-cpu-adaptive-quality/seeds.py

Seed 1234 of each is the record's run (`adaptive_quality_coverage/`, `adaptive_quality_tied/`);
1235-1236 are `adaptive_seeds/`; the full softmax's three are the transfer screen's
`ptb.ptb_rnn-seed*` (configs/ptb_rnn.toml, the row's recipe; seed 1234 its `transfer/ptb.ptb_rnn`).
"""

import statistics
from pathlib import Path

from hornn_dist.sweeps.results import read_run
from hornn_dist.sweeps.welch import holm, welch_p

HERE = Path(__file__).parent
SCREEN = HERE.parent / "2026-12-07-cpu-transfer-screen"
RUNS = {
    "full softmax": [SCREEN / "transfer/ptb.ptb_rnn"]
    + [SCREEN / f"transfer_seeds/ptb.ptb_rnn-seed{s}" for s in (1235, 1236)],
    "adaptive, untied": [HERE / "adaptive_quality_coverage/ptb.rnn+adaptive"]
    + [HERE / f"adaptive_seeds/ptb.rnn+adaptive-seed{s}" for s in (1235, 1236)],
    "adaptive, tied head": [HERE / "adaptive_quality_tied/ptb.rnn+adaptive_tied"]
    + [HERE / f"adaptive_seeds/ptb.rnn+adaptive_tied-seed{s}" for s in (1235, 1236)],
}


def main() -> None:
    stats = {}
    for name, folders in RUNS.items():
        runs = [read_run(folder) for folder in folders]
        assert all(r is not None and r.finished for r in runs), name
        for split, values in (("valid", [r.best_valid_ppl for r in runs]),
                              ("test", [r.test_ppl for r in runs])):  # fmt: skip
            mean, sd = statistics.mean(values), statistics.stdev(values)
            stats[name, split] = (mean, sd, len(values))
            each = ", ".join(f"{v:.2f}" for v in values)
            print(f"{name:20} {split:5} {mean:7.2f} ± {sd:4.2f} ({each})")
    for split in ("valid", "test"):
        pvalues = {}
        mb, sb, nb = stats["full softmax", split]
        for name in ("adaptive, untied", "adaptive, tied head"):
            ma, sa, na = stats[name, split]
            pvalues[name] = welch_p(ma, sa, na, mb, sb, nb)
            print(f"{name} against the full softmax, {split}: gap {ma - mb:+.2f} "
                  f"({ma / mb - 1:+.1%}), 2 x larger sd {2 * max(sa, sb):.2f}, "
                  f"Welch p {pvalues[name]:.3g}")  # fmt: skip
        for name, adjusted in zip(pvalues, holm(list(pvalues.values())), strict=True):
            print(f"{name}, {split}: Holm p {adjusted:.3g} (2 comparisons)")


if __name__ == "__main__":
    main()

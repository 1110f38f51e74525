"""The seeded screen's verdict on one corpus: each headline against the RNN config of its size,
mean ± sd over seeds 1234-1236 of best validation and test ppl, the gap, the noise rule's 2 x
the larger sd and Welch's p (hornn_dist.sweeps.welch, as docs/results.md's tables).

    python research/records/2026-12-07-cpu-transfer-screen/seeds.py RUNS_FOLDER CORPUS
"""

import statistics
import sys
from pathlib import Path

from hornn_dist.sweeps.results import read_run
from hornn_dist.sweeps.welch import welch_p

PAIRS = (("ptb", "ptb_rnn"), ("text8", "text8_rnn"))  # headline, the RNN config of its size


def main() -> None:
    root, corpus = Path(sys.argv[1]), sys.argv[2]
    stats = {}
    for config in (c for pair in PAIRS for c in pair):
        runs = [read_run(root / f"{corpus}.{config}-seed{seed}") for seed in (1234, 1235, 1236)]
        runs = [r for r in runs if r is not None and r.finished]
        if len(runs) < 2:
            print(f"{corpus} {config}: {len(runs)} finished run(s), no spread")
            continue
        for split, values in (("valid", [r.best_valid_ppl for r in runs]),
                              ("test", [r.test_ppl for r in runs])):  # fmt: skip
            mean, sd = statistics.mean(values), statistics.stdev(values)
            stats[config, split] = (mean, sd, len(values))
            each = ", ".join(f"{v:.2f}" for v in values)
            print(f"{corpus} {config:9} {split:5} {mean:7.2f} ± {sd:4.2f} ({each})")
    for a, b in PAIRS:
        for split in ("valid", "test"):
            if (a, split) in stats and (b, split) in stats:
                (ma, sa, na), (mb, sb, nb) = stats[a, split], stats[b, split]
                p = welch_p(ma, sa, na, mb, sb, nb)
                print(f"{corpus} {a} against {b}, {split}: gap {ma - mb:+.2f} ({ma / mb:.3f}x), "
                      f"2 x larger sd {2 * max(sa, sb):.2f}, Welch p {p:.3g}")  # fmt: skip


if __name__ == "__main__":
    main()

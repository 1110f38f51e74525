"""The seeded screen's verdict: on each corpus, each headline against the RNN config of its size,
mean ± sd over seeds 1234-1236 of best validation and test ppl, the gap, the noise rule's 2 x
the larger sd and Welch's p (hornn_dist.sweeps.welch, as docs/results.md's tables), then test's
p under Holm's correction over the corpus's pairs and, given several corpora
(comma-separated), over every pair of them.

    python research/records/2026-12-07-cpu-transfer-screen/seeds.py RUNS_FOLDER CORPUS[,CORPUS...] [SCREEN]

Seed 1234 of a config is the screen's own run of it (`configs/sweeps/transfer.toml`, seed 1234,
the same recipe): where RUNS_FOLDER lacks it, it is read from the screen's runs in SCREEN (its
`SCREEN_RUNS` name), and the line says so. `text8_rnn` has none there: the screen's ran the
plain softmax it pins, the config asks for the fused one.
"""

import statistics
import sys
from pathlib import Path

from hornn_dist.sweeps.results import read_run
from hornn_dist.sweeps.welch import holm, welch_p

PAIRS = (("ptb", "ptb_rnn"), ("text8", "text8_rnn"))  # headline, the RNN config of its size
SCREEN_RUNS = {"ptb": "ptb-gated3", "ptb_rnn": "ptb_rnn", "text8": "text8-gated3"}


def seed_runs(root: Path, screen: Path | None, corpus: str, config: str) -> list:
    """Return the finished runs of seeds 1234-1236 (1234 from the screen where root lacks it)."""
    runs = []
    for seed in (1234, 1235, 1236):
        run = read_run(root / f"{corpus}.{config}-seed{seed}")
        if (run is None or not run.finished) and seed == 1234 and screen and config in SCREEN_RUNS:
            run = read_run(screen / f"{corpus}.{SCREEN_RUNS[config]}")
            if run is not None and run.finished:
                print(
                    f"{corpus} {config}: seed 1234 is the screen's {corpus}.{SCREEN_RUNS[config]}"
                )
        if run is not None and run.finished:
            runs.append(run)
    return runs


def main() -> None:
    root, corpora = Path(sys.argv[1]), sys.argv[2].split(",")
    screen = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    every = {}  # (corpus, pair) -> test's Welch p
    for corpus in corpora:
        tested = verdict(root, screen, corpus)
        every.update({(corpus, pair): p for pair, p in tested.items()})
        for (a, b), adjusted in zip(tested, holm(list(tested.values())), strict=True):
            print(f"{corpus} {a} against {b}, test: Holm p {adjusted:.3g} "
                  f"({len(tested)} comparisons: this corpus's)")  # fmt: skip
    if len(corpora) > 1:
        for (corpus, (a, b)), adjusted in zip(every, holm(list(every.values())), strict=True):
            print(f"{corpus} {a} against {b}, test: Holm p {adjusted:.3g} "
                  f"({len(every)} comparisons: every corpus's)")  # fmt: skip


def verdict(root: Path, screen: Path | None, corpus: str) -> dict[tuple[str, str], float]:
    """Print one corpus's means, gaps and Welch p; return each pair's test Welch p."""
    stats = {}
    for config in (c for pair in PAIRS for c in pair):
        runs = seed_runs(root, screen, corpus, config)
        if len(runs) < 2:
            print(f"{corpus} {config}: {len(runs)} finished run(s), no spread")
            continue
        for split, values in (("valid", [r.best_valid_ppl for r in runs]),
                              ("test", [r.test_ppl for r in runs])):  # fmt: skip
            mean, sd = statistics.mean(values), statistics.stdev(values)
            stats[config, split] = (mean, sd, len(values))
            each = ", ".join(f"{v:.2f}" for v in values)
            print(f"{corpus} {config:9} {split:5} {mean:7.2f} ± {sd:4.2f} ({each})")
    tested = {}
    for a, b in PAIRS:
        for split in ("valid", "test"):
            if (a, split) in stats and (b, split) in stats:
                (ma, sa, na), (mb, sb, nb) = stats[a, split], stats[b, split]
                p = welch_p(ma, sa, na, mb, sb, nb)
                if split == "test":
                    tested[a, b] = p
                print(f"{corpus} {a} against {b}, {split}: gap {ma - mb:+.2f} ({ma / mb:.3f}x), "
                      f"2 x larger sd {2 * max(sa, sb):.2f}, Welch p {p:.3g}")  # fmt: skip
    return tested


if __name__ == "__main__":
    main()

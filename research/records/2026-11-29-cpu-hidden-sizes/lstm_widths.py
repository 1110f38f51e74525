"""torch.nn.LSTM's training step at hidden sizes around 400, as the PTB runs train it: tied
embedding and output layer, dropout 0.5 on both sides, B 20, T 30, V 10,000, one thread, fp32
and bf16 autocast; median tokens/s of 5 rounds of 8 steps (forward, loss, backward; no update).

    OMP_NUM_THREADS=1 python research/records/2026-11-29-cpu-hidden-sizes/lstm_widths.py
"""

import statistics
import time

import torch
from torch import nn

torch.set_num_threads(1)
V, B, T = 10_000, 20, 30


def tokens_per_s(hidden: int, bf16: bool) -> float:
    """Return the median tokens/s of 5 rounds of 8 steps of one LSTM LM of width `hidden`."""
    torch.manual_seed(0)
    emb, rnn, out = nn.Embedding(V, hidden), nn.LSTM(hidden, hidden), nn.Linear(hidden, V)
    out.weight = emb.weight
    drop = nn.Dropout(0.5)
    x, y = torch.randint(0, V, (T, B)), torch.randint(0, V, (T * B,))
    params = [*emb.parameters(), *rnn.parameters(), out.bias]

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            h, _ = rnn(drop(emb(x)))
            logits = out(drop(h))
        nn.functional.cross_entropy(logits.float().view(-1, V), y).backward()
        for p in params:
            p.grad = None

    for _ in range(3):
        step()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(8):
            step()
        rounds.append(8 * B * T / (time.perf_counter() - start))
    return statistics.median(rounds)


if __name__ == "__main__":
    widths = (400, 416, 419, 420, 424, 432)
    print("| precision | " + " | ".join(f"H {h}" for h in widths) + " |")
    print("| --- | " + " | ".join("---:" for _ in widths) + " |")
    for bf16 in (False, True):
        speeds = [f"{tokens_per_s(h, bf16):,.0f}" for h in widths]
        print(f"| {'bf16' if bf16 else 'fp32'} | " + " | ".join(speeds) + " |")

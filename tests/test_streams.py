"""TBPTT and evaluation streams: contents, rank slicing, resume, full target coverage, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hornn_dist.data.streams import ArrayTokens, EvalStream, TBPTTStream
from hornn_dist.util.errors import CheckpointError, ConfigError, DataError


def positions(n: int) -> ArrayTokens:
    """Return a source whose token i is i, so every token names its own position."""
    return ArrayTokens(np.arange(n, dtype=np.uint32))


def random_tokens(n: int, seed: int = 0) -> ArrayTokens:
    """Return a source of n random uint16 token ids."""
    return ArrayTokens(np.random.default_rng(seed).integers(0, 60000, n, dtype=np.uint16))


class CountingTokens(ArrayTokens):
    """An ArrayTokens that records every read, to check the stream never loads the split."""

    def __init__(self, array: np.ndarray) -> None:
        super().__init__(array)
        self.reads: list[tuple[int, int]] = []

    def read(self, a: int, b: int) -> np.ndarray:
        self.reads.append((a, b))
        return super().read(a, b)


def one_line(exc: pytest.ExceptionInfo) -> str:
    """Return the exception message after checking it is a single line."""
    msg = str(exc.value)
    assert "\n" not in msg and msg
    return msg


# --- training stream -------------------------------------------------------------------------


@pytest.mark.parametrize("n,b,t", [(25, 4, 2), (1000, 8, 7), (1001, 4, 5), (97, 4, 3)])
def test_train_contents_match_batchify_oracle(n: int, b: int, t: int) -> None:
    src = random_tokens(n, seed=n)
    data = src.array.astype(np.int64)
    length = (n - 1) // b
    inputs = data[: b * length].reshape(b, length).T  # (L, B), word_language_model's batchify
    targets = data[1 : b * length + 1].reshape(b, length).T  # (L, B)
    stream = TBPTTStream(src, b, t)
    assert stream.steps_per_epoch == length // t
    for k in range(stream.steps_per_epoch):
        x, y = stream.batch(k)
        assert x.dtype == torch.int64 and y.dtype == torch.int64
        assert x.shape == (t, b) and y.shape == (t, b)
        np.testing.assert_array_equal(x.numpy(), inputs[k * t : k * t + t])
        np.testing.assert_array_equal(y.numpy(), targets[k * t : k * t + t])


def test_train_shift_and_contiguity() -> None:
    stream = TBPTTStream(positions(1000), 8, 6)
    length = 999 // 8
    prev_y = None
    for k in range(stream.steps_per_epoch):
        x, y = stream.batch(k)
        assert torch.equal(y, x + 1)  # token i is i: the target is the next position
        assert torch.equal(y[:-1], x[1:])  # y is x shifted by one within each stream
        assert torch.equal(x[0], torch.arange(8) * length + k * 6)  # stream j starts at j*L
        if prev_y is not None:
            assert torch.equal(x[0], prev_y[-1])  # step k+1 continues where step k ended
        prev_y = y
    x, y = stream.batch(0)
    y[0, 0] = -1  # x and y do not share memory
    assert x[1, 0] == 1


@pytest.mark.parametrize("world_size", [2, 4])
def test_train_ranks_concatenate_to_one_process(world_size: int) -> None:
    src = random_tokens(2000, seed=1)
    full = TBPTTStream(src, 8, 5)
    ranks = [TBPTTStream(src, 8, 5, r, world_size) for r in range(world_size)]
    assert all(s.steps_per_epoch == full.steps_per_epoch for s in ranks)
    for k in range(full.steps_per_epoch):
        x, y = full.batch(k)
        parts = [s.batch(k) for s in ranks]
        assert all(p[0].shape == (5, 8 // world_size) for p in parts)
        assert torch.equal(torch.cat([p[0] for p in parts], dim=1), x)
        assert torch.equal(torch.cat([p[1] for p in parts], dim=1), y)


def test_train_reads_only_this_ranks_windows() -> None:
    src = CountingTokens(np.arange(10_000, dtype=np.uint16))
    stream = TBPTTStream(src, 8, 10, rank=1, world_size=4)
    stream.batch(3)
    assert len(src.reads) == 2  # B/W reads per step
    assert all(b - a == 11 for a, b in src.reads)  # T + 1 tokens each
    assert [a for a, _ in src.reads] == [2 * 1249 + 30, 3 * 1249 + 30]


def test_next_batch_advances_and_rolls_over_after_the_last_batch() -> None:
    stream = TBPTTStream(positions(200), 4, 5)
    assert stream.steps_per_epoch == 9
    for k in range(stream.steps_per_epoch - 1):
        x, _ = stream.next_batch()
        assert torch.equal(x, stream.batch(k)[0])
        assert (stream.epoch, stream.step) == (0, k + 1)
    x, _ = stream.next_batch()  # the epoch's last batch: the epoch is counted at once
    assert torch.equal(x, stream.batch(8)[0])
    assert (stream.epoch, stream.step) == (1, 0)
    second = [stream.next_batch()[0] for _ in range(stream.steps_per_epoch)]
    assert all(torch.equal(x, stream.batch(k)[0]) for k, x in enumerate(second))
    assert (stream.epoch, stream.step) == (2, 0)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("epoch,consumed", [(0, 0), (0, 3), (1, 0), (1, 5), (2, 8)])
def test_resume_gives_the_very_next_batch(world_size: int, epoch: int, consumed: int) -> None:
    src = random_tokens(500, seed=2)
    reference = TBPTTStream(src, 4, 6)  # uninterrupted, one process
    assert reference.steps_per_epoch == 20
    expected = []
    for _ in range(3):
        expected.append([reference.next_batch()[0] for _ in range(reference.steps_per_epoch)])
    for e in range(1, 3):  # every epoch repeats epoch 0's order
        assert all(torch.equal(a, b) for a, b in zip(expected[0], expected[e], strict=True))

    run = TBPTTStream(src, 4, 6)  # interrupted, saved with one process
    for _ in range(epoch * run.steps_per_epoch + consumed):
        run.next_batch()
    state = run.state_dict()
    assert (state["epoch"], state["step"]) == (epoch, consumed)

    ranks = [TBPTTStream(src, 4, 6, r, world_size) for r in range(world_size)]  # resumed on W
    for s in ranks:
        s.load_state_dict(state)
    nexts = [s.next_batch()[0] for s in ranks]
    assert torch.equal(torch.cat(nexts, dim=1), expected[epoch][consumed])
    assert all((s.epoch, s.step) == (epoch, consumed + 1) for s in ranks)


def test_an_older_state_after_the_last_batch_resumes_at_the_next_epoch() -> None:
    # written by earlier versions when train.max_steps or a signal hit an epoch's last batch
    state = TBPTTStream(positions(200), 4, 5).state_dict() | {"epoch": 0, "step": 9}
    resumed = TBPTTStream(positions(200), 4, 5)
    resumed.load_state_dict(state)
    assert (resumed.epoch, resumed.step) == (1, 0)
    x, _ = resumed.next_batch()
    assert torch.equal(x, resumed.batch(0)[0])


def test_minimal_state_is_accepted() -> None:
    stream = TBPTTStream(positions(200), 4, 5)
    stream.load_state_dict({"epoch": 3, "step": 2})
    assert (stream.epoch, stream.step) == (3, 2)
    stream.load_state_dict({"epoch": torch.tensor(1), "step": np.int64(4)})
    assert (stream.epoch, stream.step) == (1, 4)


# --- evaluation stream -----------------------------------------------------------------------

EVAL_CASES = [
    # n, B, T: n - 1 divisible by B or not, T dividing the stream length or not, T > stream
    (25, 4, 2),
    (12, 4, 2),
    (101, 4, 5),
    (102, 4, 5),
    (103, 8, 3),
    (9, 8, 3),  # n - 1 == B: one target per stream
    (50, 4, 100),  # one short step
    (1000, 16, 7),
    (4097, 8, 64),
]


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("n,b,t", EVAL_CASES)
def test_eval_covers_every_target_once(n: int, b: int, t: int, world_size: int) -> None:
    ranks = [EvalStream(positions(n), b, t, r, world_size) for r in range(world_size)]
    assert len({len(s) for s in ranks}) == 1  # same number of steps everywhere
    assert sum(s.num_local_targets for s in ranks) == ranks[0].num_targets == n - 1
    seen = []
    masked = 0
    for s in ranks:
        local = 0
        for k, (x, y, mask) in enumerate(s):
            assert x.dtype == y.dtype == torch.int64 and mask.dtype == torch.bool
            assert x.shape == y.shape == mask.shape == (s.step_len(k), b // world_size)
            assert 1 <= s.step_len(k) <= t
            assert torch.equal(y[mask], x[mask] + 1)  # target i + 1 from input i
            assert not x[~mask].any() and not y[~mask].any()  # padding is zero
            seen.append(y[mask])
            local += int(mask.sum())
        assert local == s.num_local_targets
        masked += local
    assert masked == n - 1
    seen_all = torch.sort(torch.cat(seen)).values
    assert torch.equal(seen_all, torch.arange(1, n))  # every target index exactly once
    step_lens = [[s.step_len(k) for k in range(len(s))] for s in ranks]
    assert all(lens == step_lens[0] for lens in step_lens)


@pytest.mark.parametrize("n,b,t", EVAL_CASES)
def test_eval_streams_are_contiguous_and_balanced(n: int, b: int, t: int) -> None:
    stream = EvalStream(positions(n), b, t)
    steps = list(stream)
    x = torch.cat([s[0] for s in steps])  # (sum T_k, B)
    mask = torch.cat([s[2] for s in steps])  # (sum T_k, B)
    lengths = mask.sum(0)
    base, extra = divmod(n - 1, b)
    assert lengths.tolist() == [base + 1] * extra + [base] * (b - extra)
    start = 0
    for j in range(b):
        column = x[: lengths[j], j]
        assert torch.equal(column, torch.arange(start, start + lengths[j]))  # one stretch
        assert mask[: lengths[j], j].all() and not mask[lengths[j] :, j].any()  # pad at end
        start += int(lengths[j])


@pytest.mark.parametrize("world_size", [2, 4])
def test_eval_ranks_concatenate_to_one_process(world_size: int) -> None:
    src = random_tokens(1003, seed=3)
    full = EvalStream(src, 8, 9)
    ranks = [EvalStream(src, 8, 9, r, world_size) for r in range(world_size)]
    for k in range(len(full)):
        whole = full.batch(k)
        parts = [s.batch(k) for s in ranks]
        for i in range(3):
            assert torch.equal(torch.cat([p[i] for p in parts], dim=1), whole[i])


def test_eval_values_match_token_array() -> None:
    src = random_tokens(103, seed=4)
    stream = EvalStream(src, 4, 10)
    data = src.array.astype(np.int64)
    x = torch.cat([s[0] for s in stream]).numpy()
    y = torch.cat([s[1] for s in stream]).numpy()
    # 102 pairs over 4 streams: 26, 26, 25, 25 inputs starting at 0, 26, 52, 77
    for j, (start, length) in enumerate([(0, 26), (26, 26), (52, 25), (77, 25)]):
        np.testing.assert_array_equal(x[:length, j], data[start : start + length])
        np.testing.assert_array_equal(y[:length, j], data[start + 1 : start + length + 1])


# --- errors ----------------------------------------------------------------------------------


def test_batch_not_divisible_by_world_size() -> None:
    with pytest.raises(ConfigError) as exc:
        TBPTTStream(positions(1000), 20, 5, rank=0, world_size=3)
    msg = one_line(exc)
    assert "train.batch_size=20" in msg and "3 processes" in msg and "multiple of 3" in msg
    with pytest.raises(ConfigError) as exc:
        EvalStream(positions(1000), 10, 5, rank=0, world_size=4)
    msg = one_line(exc)
    assert "train.eval_batch_size=10" in msg and "4 processes" in msg


def test_split_too_small() -> None:
    with pytest.raises(ConfigError) as exc:
        TBPTTStream(positions(100), 20, 30, split="valid")
    msg = one_line(exc)
    assert "'valid'" in msg and "100 tokens" in msg and "20 streams" in msg and "601" in msg
    assert "lower train.batch_size or train.bptt" in msg
    TBPTTStream(positions(601), 20, 30)  # exactly enough: one step
    with pytest.raises(ConfigError) as exc:
        EvalStream(positions(8), 8, 3, split="test")
    msg = one_line(exc)
    assert "'test'" in msg and "8 tokens" in msg and "8 streams" in msg
    for n in (0, 1):
        with pytest.raises(ConfigError):
            EvalStream(positions(n), 1, 3)
        with pytest.raises(ConfigError):
            TBPTTStream(positions(n), 1, 3)


@pytest.mark.parametrize(
    "args,words",
    [
        ((100, 4, 0), ["train.bptt", ">= 1", "got 0"]),
        ((100, 0, 5), ["train.batch_size", "got 0"]),
        ((100, 4, 5, 2, 2), ["rank", "[0, 2)", "got 2"]),
        ((100, 4, 5, 0, 0), ["world_size", "got 0"]),
    ],
)
def test_bad_layout_arguments(args: tuple, words: list[str]) -> None:
    n, *rest = args
    with pytest.raises(ConfigError) as exc:
        TBPTTStream(positions(n), *rest)
    msg = one_line(exc)
    assert all(w in msg for w in words)
    with pytest.raises(ConfigError):
        EvalStream(positions(n), *rest)


def test_bad_state() -> None:
    stream = TBPTTStream(positions(200), 4, 5)  # 9 steps per epoch
    with pytest.raises(DataError) as exc:
        stream.load_state_dict({"epoch": 0, "step": 10})
    msg = one_line(exc)
    assert "step=10" in msg and "[0, 9]" in msg
    other = TBPTTStream(positions(400), 4, 5).state_dict()
    with pytest.raises(DataError) as exc:
        stream.load_state_dict(other)
    msg = one_line(exc)
    assert "num_tokens 400 vs 200" in msg and "steps_per_epoch 19 vs 9" in msg
    with pytest.raises(DataError) as exc:
        stream.load_state_dict(TBPTTStream(positions(200), 4, 4).state_dict())
    assert "bptt 4 vs 5" in one_line(exc)
    with pytest.raises(CheckpointError) as exc:
        stream.load_state_dict({"step": 1})
    assert "'epoch'" in one_line(exc)
    with pytest.raises(CheckpointError) as exc:
        stream.load_state_dict({"epoch": -1, "step": 1})
    assert "epoch=-1" in one_line(exc)
    with pytest.raises(CheckpointError) as exc:
        stream.load_state_dict({"epoch": 0, "step": "3"})
    assert "'step'" in one_line(exc)
    assert (stream.epoch, stream.step) == (0, 0)  # a rejected state changes nothing


def test_out_of_range_steps_and_reads() -> None:
    stream = TBPTTStream(positions(200), 4, 5)
    with pytest.raises(IndexError):
        stream.batch(9)
    with pytest.raises(IndexError):
        EvalStream(positions(200), 4, 5).batch(10)
    with pytest.raises(IndexError):
        positions(10).read(5, 11)
    with pytest.raises(DataError):
        ArrayTokens(np.zeros((2, 3), dtype=np.int32))
    with pytest.raises(DataError):
        ArrayTokens(np.zeros(3, dtype=np.float32))

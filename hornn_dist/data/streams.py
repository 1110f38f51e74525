"""Cut a split's token ids into truncated-BPTT batches: B parallel contiguous streams per rank.

Training layout (`TBPTTStream`). The split's n tokens are cut into B = global batch equal
streams of L = (n - 1) // B inputs each (the tail is dropped); stream j reads inputs
[j*L, j*L + L) and predicts the token after each. The streams stand side by side as columns,
time runs down, and step k hands out rows [k*T, k*T + T). Rank r of W owns the columns
[r*B/W, (r+1)*B/W), so the global data order is the same for every W: putting the ranks'
columns side by side in rank order gives the one-process batch.

Example: n = 25 tokens a..y, B = 4, T = 2, W = 2, so L = 24 // 4 = 6, steps_per_epoch = 3:

    a b c d e f | g h i j k l | m n o p q r | s t u v w x | y
    stream 0      stream 1      stream 2      stream 3      (last target)

                    rank 0        rank 1
                  s0     s1     s2     s3
                +------+------+------+------+
      step 0    | a    | g    | m    | s    |   x = these T rows, (T, B/W) on each rank
                | b    | h    | n    | t    |   y = the token below each x (one down)
                +------+------+------+------+
      step 1    | c    | i    | o    | u    |   hidden state carries over from step k
                | d    | j    | p    | v    |   to k + 1 (detached): every column is
                +------+------+------+------+   one unbroken stretch of text
      step 2    | e    | k    | q    | w    |
                | f    | l    | r    | x    |   the last y row is g m s y: a stream's
                +------+------+------+------+   last target is the next one's first input

Evaluation layout (`EvalStream`). Every one of the n - 1 targets is scored exactly once: the
n - 1 (input, target) pairs are cut into B streams whose lengths differ by at most one (the
first (n - 1) % B streams are one longer) and the last step may be shorter than T. Positions
past the end of a shorter stream are padding with mask False. Example: n = 12 tokens a..l,
B = 4, T = 2, W = 2: 11 pairs in streams of 3, 3, 3, 2 inputs, 2 steps (T_0 = 2, T_1 = 1):

                    rank 0        rank 1
                  s0     s1     s2     s3
                +------+------+------+------+
      step 0    | a    | d    | g    | j    |   x, y, mask: (T_k, B/W) on each rank
                | b    | e    | h    | k    |
                +------+------+------+------+
      step 1    | c    | f    | i    | .    |   . = padding (x = y = 0, mask False)
                +------+------+------+------+

Reads go through the token source's `read(a, b)` (memory-mapped shards in training): each
step reads B/W slices of at most T + 1 tokens on each rank, never the whole split. Where the
source has a `vocab_size` (a corpus split), each batch's largest id is checked against it
(one max per batch): an id past the vocabulary is a DataError naming its shard and token,
not an index error in the embedding (or a device-side assert on a GPU).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import numpy as np
import torch

from hornn_dist.util.errors import CheckpointError, ConfigError, DataError

__all__ = ["ArrayTokens", "EvalStream", "TBPTTStream", "TokenSource"]


class TokenSource(Protocol):
    """Anything that holds a split's token ids: a length and a reader of half-open ranges."""

    def __len__(self) -> int:
        """Return the number of tokens."""
        ...

    def read(self, a: int, b: int) -> np.ndarray:
        """Return tokens [a, b) as a 1-D integer array."""
        ...


class ArrayTokens:
    """A token source over a 1-D integer array or np.memmap (tests, generation, evaluation)."""

    def __init__(self, array: np.ndarray) -> None:
        array = np.asarray(array)
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise DataError(
                f"ArrayTokens needs a 1-D integer array, got shape {array.shape} dtype {array.dtype}"
            )
        self.array = array

    def __len__(self) -> int:
        """Return the number of tokens."""
        return int(self.array.shape[0])

    def read(self, a: int, b: int) -> np.ndarray:
        """Return tokens [a, b) as a view of the array; raise IndexError outside [0, len]."""
        if not 0 <= a <= b <= len(self):
            raise IndexError(f"read({a}, {b}) is outside the {len(self)} tokens")
        return self.array[a:b]


def check_layout(
    batch: int, bptt: int, rank: int, world_size: int, batch_key: str, bptt_key: str
) -> None:
    """Raise ConfigError for a batch size, bptt or rank that cannot be laid out on W processes."""
    if batch < 1:
        raise ConfigError(f"{batch_key} must be >= 1, got {batch}")
    if bptt < 1:
        raise ConfigError(f"{bptt_key} must be >= 1, got {bptt}")
    if world_size < 1:
        raise ConfigError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ConfigError(f"rank must be in [0, {world_size}), got {rank}")
    if batch < world_size:
        raise ConfigError(
            f"{batch_key}={batch} streams cannot feed {world_size} processes (each needs at "
            f"least one); set {batch_key} to a multiple of {world_size} or launch fewer processes"
        )
    if batch % world_size != 0:
        raise ConfigError(
            f"{batch_key}={batch} is not divisible by the {world_size} processes; "
            f"choose a multiple of {world_size}"
        )


class TBPTTStream:
    """Training batches of B contiguous streams, T tokens per step, this rank's B/W columns."""

    def __init__(
        self,
        tokens: TokenSource,
        global_batch: int,
        bptt: int,
        rank: int = 0,
        world_size: int = 1,
        *,
        split: str = "train",
        batch_key: str = "train.batch_size",
        bptt_key: str = "train.bptt",
    ) -> None:
        n = len(tokens)
        check_layout(global_batch, bptt, rank, world_size, batch_key, bptt_key)
        need = global_batch * bptt + 1
        if n < need:
            raise ConfigError(
                f"split '{split}' has {n} tokens, too few for {global_batch} streams of "
                f"{bptt_key}={bptt} tokens plus one target (needs >= {need}); "
                f"lower {batch_key} or {bptt_key}"
            )
        self.tokens = tokens
        self.num_tokens = n
        self.global_batch = global_batch
        self.bptt = bptt
        self.rank = rank
        self.world_size = world_size
        self.local_batch = global_batch // world_size  # B/W columns on this rank
        self.stream_len = (n - 1) // global_batch  # L inputs per stream
        self.steps_per_epoch = self.stream_len // bptt  # S; the last L - S*T inputs are dropped
        first = rank * self.local_batch
        # start token of each local stream: (B/W,)
        self.starts = [(first + i) * self.stream_len for i in range(self.local_batch)]
        self.epoch = 0
        self.step = 0

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (x, y) of step `step` on this rank, both int64 of shape (T, B/W)."""
        if not 0 <= step < self.steps_per_epoch:
            raise IndexError(f"step {step} is outside [0, {self.steps_per_epoch})")
        t = self.bptt
        buf = np.empty((t + 1, self.local_batch), dtype=np.int64)  # (T+1, B/W)
        ranges = [(start + step * t, start + step * t + t + 1) for start in self.starts]
        for i, (a, b) in enumerate(ranges):
            buf[:, i] = self.tokens.read(a, b)
        _check_ids(self.tokens, buf, ranges)
        x = torch.from_numpy(buf[:-1])  # (T, B/W), a contiguous view of buf
        y = torch.from_numpy(buf[1:].copy())  # (T, B/W), its own memory so x and y never alias
        return x, y

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (x, y) of the current position and move past it.

        After batch k, `step == k + 1`, so a checkpoint taken after training on it resumes at
        batch k + 1; after the epoch's last batch the position is already the next epoch's
        first (`epoch += 1, step = 0`), so a checkpoint at an epoch's end counts that epoch.
        """
        x, y = self.batch(self.step)
        self.step += 1
        if self.step == self.steps_per_epoch:
            self.epoch += 1
            self.step = 0
        return x, y

    def state_dict(self) -> dict[str, int]:
        """Return the position (epoch, step) plus the layout it is valid for."""
        return {
            "epoch": self.epoch,
            "step": self.step,
            "steps_per_epoch": self.steps_per_epoch,
            "global_batch": self.global_batch,
            "bptt": self.bptt,
            "num_tokens": self.num_tokens,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a position from `state_dict()`; the next batch is the one after the saved one.

        Raises CheckpointError for a malformed state and DataError for one made on another layout
        (global batch, bptt, split size). The world size may differ: the data order does not.
        """
        values = {}
        for key in ("epoch", "step"):
            if key not in state:
                raise CheckpointError(f"stream state has no '{key}'; got keys {sorted(state)}")
            values[key] = _as_int(state, key)
        epoch, step = values["epoch"], values["step"]
        if epoch < 0:
            raise CheckpointError(f"stream state has epoch={epoch}; it must be >= 0")
        mine = self.state_dict()
        diffs = [
            f"{key} {_as_int(state, key)} vs {mine[key]}"
            for key in ("global_batch", "bptt", "num_tokens", "steps_per_epoch")
            if key in state and _as_int(state, key) != mine[key]
        ]
        if diffs:
            raise DataError(
                "stream state was saved for another data layout (saved vs now: "
                + ", ".join(diffs)
                + "); resume with the same batch size, bptt and data, or start a new run"
            )
        if not 0 <= step <= self.steps_per_epoch:
            raise DataError(
                f"stream state has step={step}, outside [0, {self.steps_per_epoch}] of this "
                f"stream's {self.steps_per_epoch} steps per epoch; resume with the same batch "
                "size, bptt and data, or start a new run"
            )
        if step == self.steps_per_epoch:  # saved by an older version after an epoch's last batch
            epoch, step = epoch + 1, 0
        self.epoch = epoch
        self.step = step


def _as_int(state: Mapping[str, Any], key: str) -> int:
    """Return state[key] as an int; raise CheckpointError when it is not an integer."""
    value = state[key]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise CheckpointError(f"stream state '{key}' must be an integer, got {value!r}")
    return int(value)


def _check_ids(tokens: TokenSource, ids: np.ndarray, ranges: list[tuple[int, int]]) -> None:
    """Raise the source's error for the first id of a batch past its `vocab_size`, if it has one.

    ids: what was read from the token ranges [a, b). A source with a `vocab_size` (a corpus
    split's `TokenReader`) has `bad_id(k)`, the error naming where token k is stored; the
    ranges are read again to find the first such token.
    """
    limit = getattr(tokens, "vocab_size", None)
    if limit is None or ids.size == 0 or int(ids.max()) < limit:
        return
    first = min(
        a + int(np.argmax(part >= limit))
        for a, b in ranges
        if ((part := tokens.read(a, b)) >= limit).any()
    )
    raise tokens.bad_id(first)  # type: ignore[attr-defined]


class EvalStream:
    """Evaluation batches that score each of the n - 1 targets once across ranks, with a mask."""

    def __init__(
        self,
        tokens: TokenSource,
        batch_size: int,
        bptt: int,
        rank: int = 0,
        world_size: int = 1,
        *,
        split: str = "valid",
        batch_key: str = "train.eval_batch_size",
        bptt_key: str = "train.bptt",
    ) -> None:
        n = len(tokens)
        check_layout(batch_size, bptt, rank, world_size, batch_key, bptt_key)
        pairs = n - 1 if n > 0 else 0  # (input, target) pairs
        if pairs < batch_size:
            raise ConfigError(
                f"split '{split}' has {n} tokens ({pairs} targets), too few for {batch_size} "
                f"streams of at least one target (needs >= {batch_size + 1} tokens); "
                f"lower {batch_key}"
            )
        self.tokens = tokens
        self.num_tokens = n
        self.batch_size = batch_size
        self.bptt = bptt
        self.rank = rank
        self.world_size = world_size
        self.local_batch = batch_size // world_size  # B/W columns on this rank
        base, extra = divmod(pairs, batch_size)
        self.max_len = base + (1 if extra else 0)  # inputs in the longest stream
        self.num_steps = -(-self.max_len // bptt)  # ceil; the same on every rank
        first = rank * self.local_batch
        local = range(first, first + self.local_batch)
        # start token and number of inputs of each local stream: (B/W,) each
        self.starts = [j * base + min(j, extra) for j in local]
        self.lengths = [base + (1 if j < extra else 0) for j in local]
        self.num_targets = pairs  # over all ranks
        self.num_local_targets = sum(self.lengths)  # on this rank

    def __len__(self) -> int:
        """Return the number of steps (the same on every rank)."""
        return self.num_steps

    def step_len(self, step: int) -> int:
        """Return T_k, the number of rows of step `step`: T, or less on the last step."""
        return min(self.bptt, self.max_len - step * self.bptt)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return (x, y, mask) of step `step` on this rank: int64, int64, bool, each (T_k, B/W)."""
        if not 0 <= step < self.num_steps:
            raise IndexError(f"step {step} is outside [0, {self.num_steps})")
        rows = self.step_len(step)
        offset = step * self.bptt
        x = np.zeros((rows, self.local_batch), dtype=np.int64)  # (T_k, B/W)
        y = np.zeros((rows, self.local_batch), dtype=np.int64)  # (T_k, B/W)
        mask = np.zeros((rows, self.local_batch), dtype=np.bool_)  # (T_k, B/W)
        ranges = []
        for i, (start, length) in enumerate(zip(self.starts, self.lengths, strict=True)):
            valid = max(0, min(rows, length - offset))  # real rows in this column
            if valid == 0:
                continue
            a = start + offset
            ranges.append((a, a + valid + 1))
            chunk = self.tokens.read(a, a + valid + 1)  # (valid + 1,)
            x[:valid, i] = chunk[:-1]
            y[:valid, i] = chunk[1:]
            mask[:valid, i] = True
        _check_ids(self.tokens, x, ranges)
        _check_ids(self.tokens, y, ranges)
        return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(mask)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Yield (x, y, mask) for every step in order; carry hidden state from one to the next."""
        for step in range(self.num_steps):
            yield self.batch(step)

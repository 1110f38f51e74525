"""Refuse a run that cannot fit before allocating it: its weights, gradients and momentum, the
optimizer's and the final scoring's copies, and the activations one training step keeps.

The parameters are counted by building the model on PyTorch's meta device (shapes only, no
memory), so the count is the real model's, whatever its architecture. The activations are
the largest buffers of one step (`activation_bytes`): the HORNN scan's buffer grows with
order² x batch x hidden, the output layer's with bptt x batch x vocabulary (less with
`model.output_layer` fused or adaptive). What is free is the smaller of the machine's
(MemAvailable, or the GPU's free memory) and, on a CPU, what the process's cgroups (a
container's limit, v1 or v2) leave.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path

import torch

from hornn_dist.models import ModelConfig
from hornn_dist.models.meta import build_on_meta
from hornn_dist.models.output_layer import BLOCK_ELEMENTS, chunk_tokens, resolve_cutoffs
from hornn_dist.models.poolings import get_pooling
from hornn_dist.util.errors import ConfigError

# a float32 weight, its gradient and SGD's momentum buffer (12), SGD's foreach temporaries at
# each step (the gradients plus weight decay: 4; a CPU run's fused SGD has none, 4 in hand) and
# the weights the test split is scored on at the end (a second model: 4); measured 20.4 a
# parameter in a cgroup (docs/performance.md, "Numbers behind the code's choices")
BYTES_PER_PARAMETER = 20
RUNTIME_BYTES = 128 << 20  # what the process loads after the check (TensorBoard, scoring)
BYTES_PER_ACTIVATION = 4  # float32 (mixed precision halves some: the estimate stays above)
# a cgroup's limit and usage: v2 names, then v1 names (memory.stat's reclaimable page cache)
CGROUP_FILES = (
    ("memory.max", "memory.current", "inactive_file"),
    ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
)
NO_LIMIT = 1 << 60  # v1 writes "no limit" as a page-rounded 2**63 - 1


def parameter_count(cfg: ModelConfig, vocab_size: int) -> int:
    """Return the number of trainable parameters of the model of `cfg`, allocating nothing."""
    try:
        return build_on_meta(cfg, vocab_size).num_parameters()
    except (RuntimeError, TypeError, OverflowError) as err:  # sizes past what torch can index
        raise ConfigError(
            f"the model is too large to build (model.hidden_size = {cfg.hidden_size}, "
            f"model.embedding_size = {cfg.embedding_size}, vocabulary {vocab_size}: "
            f"{type(err).__name__}); {_largest_sizes(cfg)}"
        ) from None


def activation_elements(cfg: ModelConfig, vocab_size: int, batch: int, bptt: int) -> int:
    """Return the number of activation values one training step of `batch` streams of `bptt`
    tokens keeps at its peak (the backward): embeddings, each layer's buffers, the logits."""
    T, B, H, N = bptt, batch, cfg.hidden_size, cfg.order
    E = cfg.embedding_size or H
    if cfg.arch == "hornn" and cfg.engine != "loop":
        # recurrence.py: the buffer U_all (N+T, B, (K+1)H), K = N (2N gated), then dU_all of the
        # same shape (gated keeps U for its backward, with the gates R and two (T, N, B, H)
        # factors); max and gated fill the per-step factors S (T, N+1, B, H); the outputs,
        # input projections and their gradients (T, B, H) each
        pooling = get_pooling(cfg.pooling)
        gated = pooling.gated
        K = pooling.weight_blocks(N)[1]
        per_layer = (N + T) * B * (K + 1) * H * (2 if gated else 1) + 3 * T * B * H
        if pooling.per_path_factors:
            per_layer += T * (N + 1) * B * H
        if gated:
            per_layer += 2 * T * N * B * H
    elif cfg.arch == "hornn":  # the autograd loop keeps each step's N path terms
        per_layer = 2 * T * (N + 2) * B * H
    else:  # torch's RNNs keep each step's gates (lstm 4, gru 3, rnn 1) and outputs
        gates = {"lstm": 4, "gru": 3}.get(cfg.arch, 1)
        per_layer = 2 * T * B * (gates + 1) * H
    return T * B * E + cfg.num_layers * per_layer + output_layer_elements(cfg, vocab_size, T * B)


def output_layer_elements(cfg: ModelConfig, vocab_size: int, tokens: int) -> int:
    """Return the float32 values the output layer (`model.output_layer`) keeps at its peak for
    a step of `tokens` tokens: plain, the logits, log-softmax and their gradient; fused, the
    logits' gradient in the autocast dtype (half a float32 each) and one chunk's buffers;
    adaptive, the plain layer's for its head and, at most, its largest cluster for every token."""
    if cfg.output_layer == "fused":
        chunk = chunk_tokens(tokens, vocab_size)
        return tokens * vocab_size // 2 + chunk * vocab_size + 2 * BLOCK_ELEMENTS
    if cfg.output_layer == "adaptive":
        bounds = [0, *resolve_cutoffs(cfg.adaptive_cutoffs, vocab_size), vocab_size]
        head = bounds[1] + len(bounds) - 2
        largest = max((b - a for a, b in itertools.pairwise(bounds[1:])), default=0)
        return 3 * tokens * (head + largest)
    return 3 * tokens * vocab_size  # logits, log-softmax, their gradient


def cgroup_folders(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> list[Path]:
    """Return this process's memory cgroup folders (v2 and v1), its own first, then each parent
    up to the root: a limit anywhere above applies too."""
    tops = []
    try:
        lines = proc_cgroup.read_text(encoding="ascii").splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: "0::/path"
            tops.append(root / path.lstrip("/"))
        elif "memory" in controllers.split(","):  # v1: "4:memory:/path"
            tops.append(root / "memory" / path.lstrip("/"))
    tops += [root, root / "memory"]  # inside a cgroup namespace the own cgroup is the root
    out: list[Path] = []
    for top in tops:
        for folder in (top, *top.parents):
            if folder not in out and (folder == root or root in folder.parents):
                out.append(folder)
    return out


def cgroup_free_bytes(folders: Iterable[Path]) -> int | None:
    """Return the least memory left under the limits of the cgroup `folders` (limit less the
    usage that cannot be reclaimed), or None when none of them sets a limit."""
    free: int | None = None
    for folder in folders:
        for limit_name, usage_name, cache_key in CGROUP_FILES:
            limit = _read_int(folder / limit_name)
            if limit is None or limit >= NO_LIMIT:
                continue
            usage = _read_int(folder / usage_name) or 0
            usage -= _stat_value(folder / "memory.stat", cache_key)  # page cache is reclaimed
            left = max(limit - max(usage, 0), 0)
            free = left if free is None else min(free, left)
    return free


def _read_int(path: Path) -> int | None:
    """Return the number in a cgroup file, None when absent, unreadable or "max"."""
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def _stat_value(path: Path, key: str) -> int:
    """Return one counter of a cgroup's memory.stat (0 when absent)."""
    try:
        for line in path.read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def available_bytes(device: torch.device, cgroups: Iterable[Path] | None = None) -> int:
    """Return the memory free for new tensors on `device`: a GPU's free memory; on a CPU the
    smaller of the machine's MemAvailable and what the cgroups' limits leave (`cgroups`:
    folders to read, default this process's own)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    free = _mem_available()
    limited = cgroup_free_bytes(cgroup_folders() if cgroups is None else cgroups)
    return free if limited is None else min(free, limited)


def _mem_available() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits(
    cfg: ModelConfig,
    vocab_size: int,
    device: torch.device,
    batch: int = 0,
    bptt: int = 0,
    cgroups: Iterable[Path] | None = None,
) -> int:
    """Raise ConfigError when the model's weights, gradients and momentum and the activations
    of a step of `batch` streams (per process) of `bptt` tokens cannot fit on `device` (on a
    CPU, once per process of this machine); return the parameter count."""
    count = parameter_count(cfg, vocab_size)
    sharing = 1 if device.type == "cuda" else int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    weights = count * BYTES_PER_PARAMETER
    activations = activation_elements(cfg, vocab_size, batch, bptt) * BYTES_PER_ACTIVATION
    need = (weights + activations + RUNTIME_BYTES) * sharing
    free = available_bytes(device, cgroups)
    if need <= free:
        return count
    on = f"{device}" + (f" ({sharing} processes)" if sharing > 1 else "")
    if activations > weights:
        what = (
            f"one training step's activations need {activations / 2**30:.1f} GiB (with "
            f"{weights / 2**30:.1f} GiB of weights, gradients and momentum)"
        )
        fix = "lower train.batch_size, train.bptt, model.hidden_size" + (
            " or model.order" if cfg.arch == "hornn" else ""
        )
    else:
        what = (
            f"the model has {count:,} parameters, whose weights, gradients and momentum need "
            f"{weights / 2**30:.1f} GiB"
        )
        fix = _largest_sizes(cfg) + ", or the vocabulary (data.max_vocab)"
    per_process = need / sharing
    total = f"{per_process / 2**30:.2f} GiB" + (
        f" per process, {need / 2**30:.2f} GiB for {sharing}" if sharing > 1 else ""
    )
    raise ConfigError(
        f"{what}; with {RUNTIME_BYTES / 2**30:.2f} GiB for torch's runtime that is {total}, "
        f"more than the {free / 2**30:.2f} GiB {on} has available; {fix}"
    )


def _largest_sizes(cfg: ModelConfig) -> str:
    """Return the fix that names the larger of model.embedding_size and model.hidden_size first."""
    if cfg.embedding_size > cfg.hidden_size:
        return "lower model.embedding_size or model.hidden_size"
    return "lower model.hidden_size or model.embedding_size"

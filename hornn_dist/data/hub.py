"""Text from Hugging Face datasets (the hub, or `datasets`' local-file builders), streamed.

A hub that does not answer is found at once with one request (`check_hub_reachable`), and every
`datasets` failure the user can fix becomes one DataError line naming the key to change
(`_hub_error`). `download_hub` writes the splits as local UTF-8 files, which the rest of
preparation reads like any other (`text_files.py`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hornn_dist.data.config import PRESET_DOWNLOADS, PRESET_LOCAL_PATHS
from hornn_dist.data.text_files import OnBytes, expand
from hornn_dist.util.errors import DataError, first_line
from hornn_dist.util.files import open_for_writing

# Builders of `datasets` that read local files given as data_files.
LOCAL_BUILDERS = ("parquet", "csv", "json", "text", "arrow")
HUB_CHECK_SECONDS = 3.0  # how long the one reachability check of the hub waits for an answer


def _hub_where(cfg: Any) -> str:
    return f"hub dataset {cfg.hub_id!r}" + (
        f" (config {cfg.hub_config!r})" if cfg.hub_config else ""
    )


def _local_files_hint(cfg: Any) -> str:
    """Return how to read cfg's corpus from local files instead of the hub."""
    if cfg.preset in PRESET_DOWNLOADS:
        place = PRESET_LOCAL_PATHS[cfg.preset]
        download = PRESET_DOWNLOADS[cfg.preset].format(path=place)
        return f'use a local copy: {download} and set data.path = "{place}"'
    return 'use local files: data.source = "files" with data.train, data.valid, data.test'


def _unreachable(cfg: Any, why: str) -> DataError:
    return DataError(
        f"cannot reach the Hugging Face hub for {_hub_where(cfg)} ({why}); HINT: {_local_files_hint(cfg)}"
    )


@functools.cache
def _hub_unreachable(endpoint: str) -> str | None:
    """Return why the hub endpoint gave no answer to one HEAD request, or None when it answered."""
    from huggingface_hub.utils import get_session  # lazy; the session `datasets` itself uses

    try:
        get_session().head(endpoint, timeout=HUB_CHECK_SECONDS)
    except Exception as e:  # noqa: BLE001 - any failure to get an answer means unreachable
        return f"no answer from {endpoint} within {HUB_CHECK_SECONDS:g} s: {first_line(e)}"
    return None


def check_hub_reachable(cfg: Any) -> None:
    """Raise DataError at once when cfg's hub dataset needs the hub and it does not answer.

    `datasets` would retry for ~20 s, each warning printed twice, before failing. One HEAD to
    the hub's endpoint (`huggingface_hub.constants.ENDPOINT`, where `datasets` would go) per
    process; none for local builders and folders, or in offline mode, where `datasets` fails
    at once by itself (or reads its cache)."""
    if cfg.hub_id in LOCAL_BUILDERS or os.path.exists(cfg.hub_id):
        return
    import datasets.config
    from huggingface_hub import constants  # lazy: only the hub path needs it

    if constants.HF_HUB_OFFLINE or datasets.config.HF_HUB_OFFLINE:
        return
    why = _hub_unreachable(constants.ENDPOINT)
    if why is not None:
        raise _unreachable(cfg, why)


def _hub_error(e: BaseException, cfg: Any) -> DataError | None:
    """Return the DataError that explains a `datasets` failure, or None to let it through."""
    text = f"{type(e).__name__}: {e}"
    where = _hub_where(cfg)
    if "Dataset scripts are no longer supported" in text:
        return DataError(
            f"{where} is script-based, which datasets >= 4 cannot run; HINT: use its parquet conversion: "
            f'data.hub_revision = "refs/convert/parquet" with data.hub_data_dir = "<config name>" '
            '(or download the files and set data.source = "files")'
        )
    names = {c.__name__ for c in type(e).__mro__}
    if names & {
        "ConnectionError",
        "OfflineModeIsEnabled",
        "ConnectError",
        "TimeoutException",
        "Timeout",
        "LocalEntryNotFoundError",
    }:
        return _unreachable(cfg, "offline or no network")
    if names & {"DatasetNotFoundError", "RepositoryNotFoundError", "GatedRepoError"}:
        return DataError(
            f"{where} was not found or is not accessible ({first_line(e)}); HINT: check data.hub_id and your Hugging Face login"
        )
    if names & {
        "FileNotFoundError",
        "DataFilesNotFoundError",
        "EmptyDatasetError",
        "ValueError",
        "KeyError",
    }:
        return DataError(
            f"{where}: {first_line(e)}; HINT: check data.hub_config, data.hub_revision, data.hub_data_dir and the split names"
        )
    return None


def iter_hub_texts(cfg: Any, split: str) -> Iterator[str]:
    """Yield the text column of one split of a hub dataset (or local-file builder), streaming."""
    try:
        import datasets  # lazy: only this path needs it
    except ImportError:
        raise DataError(
            'data.source = "hub" needs the `datasets` package, which is not installed; '
            'HINT: pip install datasets, or use local files (data.source = "files" with data.train, data.valid, data.test)'
        ) from None

    datasets.logging.set_verbosity_error()
    data_files = None
    if cfg.train or cfg.valid or cfg.test:
        pairs = [
            (cfg.train_split, cfg.train, "train"),
            (cfg.valid_split, cfg.valid, "valid"),
            (cfg.test_split, cfg.test, "test"),
        ]
        local = cfg.hub_id in LOCAL_BUILDERS
        data_files = {
            name: (expand(files, key) if local else files)
            for name, files, key in pairs
            if name and files
        }
    check_hub_reachable(cfg)
    try:
        ds = datasets.load_dataset(
            cfg.hub_id,
            cfg.hub_config or None,
            data_dir=cfg.hub_data_dir or None,
            data_files=data_files,
            revision=cfg.hub_revision or None,
            split=split,
            streaming=True,
        )
        for row in ds:
            if cfg.text_column not in row:
                raise DataError(
                    f"hub dataset {cfg.hub_id!r} has no column {cfg.text_column!r} (columns: {', '.join(row)}); HINT: set data.text_column"
                )
            yield row[cfg.text_column] or ""
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - translated into one line, or re-raised
        error = _hub_error(e, cfg)
        if error is None:
            raise
        raise error from None


def download_hub(
    cfg: Any, dest: Path, joined: bool, on_bytes: OnBytes = None
) -> dict[str, list[str]]:
    """Write the hub splits as local UTF-8 files under dest; return {split: [file]}.

    One row is one line (a newline is added where a row lacks one), unless `joined`: then the
    rows of all splits, in order, are pieces of one text (text8) and go as they are into one
    file, returned as the only "train" file.
    """
    dest.mkdir(parents=True, exist_ok=True)
    named = (("train", cfg.train_split), ("valid", cfg.valid_split), ("test", cfg.test_split))
    out: dict[str, list[str]] = {}
    for ours, theirs in named:
        if not theirs:
            continue
        path = dest / ("text.txt" if joined else f"{ours}.txt")
        with open_for_writing(path, append=True, binary=False) as f:
            for text in iter_hub_texts(cfg, theirs):
                if not joined and not text.endswith("\n"):
                    text += "\n"
                f.write(text)
                if on_bytes is not None:
                    on_bytes(len(text))
        out["train" if joined else ours] = [str(path)]
    return out

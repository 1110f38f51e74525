"""The language model as a Hub model folder: `save_pretrained` / `from_pretrained` (huggingface_hub).

    config.json          {"model": the [model] section, "vocab_size": V, ...}
    model.safetensors    the weights
    README.md            the model card (`CARD`)
    checksums.json       size and sha256 of the files above but the card (and of tokenizer.json
                         and tokenizer_config.json, which hornn_dist.export puts beside them)

`from_pretrained` checks config.json and model.safetensors against checksums.json before it
reads the weights (a folder without it, or a damaged file, is one CheckpointError).

`PretrainedLM.from_pretrained(folder_or_repo_id)` is a `RecurrentLM` with those weights, in
eval mode, on the CPU. How its HORNN layers run (`plan.py`) is not part of the folder: it is
decided where the model is loaded (pass `plan=` for another device or mixed precision).
`hornn_dist.export` writes such a folder from a checkpoint, with the corpus's tokenizer.json.
"""

# No `from __future__ import annotations`: the Hub mixin reads __init__'s annotations at run
# time to rebuild the ModelConfig from config.json.

import contextlib
import dataclasses
import io
import os
import stat
from pathlib import Path
from typing import Any

from huggingface_hub import PyTorchModelHubMixin, hf_hub_download
from huggingface_hub.errors import EntryNotFoundError

from hornn_dist.models.config import ModelConfig
from hornn_dist.models.lm import RecurrentLM
from hornn_dist.models.plan import LayerPlan, plan_for
from hornn_dist.util.errors import CheckpointError
from hornn_dist.util.files import CHECKSUMS, checksums_problem, write_checksums

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"  # put beside them by hornn_dist.export
TOKENIZER_CONFIG = "tokenizer_config.json"  # its special words, for transformers (export)
# the card (README.md) is prose, edited before upload
CHECKED = (CONFIG, WEIGHTS, TOKENIZER, TOKENIZER_CONFIG)
REEXPORT = "export the model again (python -m hornn_dist.export RUN_OR_CHECKPOINT OUT_DIR)"

CARD = """---
{{ card_data }}
---

# {{ title }}

A word-level language model trained with `hornn_dist`: {{ model_words }}. A Higher Order RNN
(HORNN; Soltani & Jiang, 2016) feeds the hidden states of the last N steps back through
separate weighted paths.

| | |
|---|---|
| parameters | {{ parameters }} |
| vocabulary | {{ vocab_size }} words, `tokenizer.json` (a `tokenizers` WordLevel model: `<unk>` = 0, `<eos>` = 1) |
| {{ split }} perplexity | **{{ ppl }}** ({{ tokens }} tokens, mean loss {{ loss }} nats) |
| checkpoint | {{ checkpoint }} |

## Use

```python
from hornn_dist.models.pretrained import PretrainedLM
from tokenizers import Tokenizer
import torch

model = PretrainedLM.from_pretrained("{{ where }}")  # this folder, or its Hub repo id
tokenizer = Tokenizer.from_file("{{ where }}/tokenizer.json")  # or transformers.PreTrainedTokenizerFast(tokenizer_file=...)
ids = torch.tensor(tokenizer.encode("and god said").ids).view(-1, 1)  # (T, B = 1)
logits, state = model(ids)                                          # (T, 1, V), carried state
```

```bash
python -m hornn_dist.generate {{ where }} --prompt "and god said" --tokens 50 --top-k 40
```

## Training config

The run's resolved config (`config.json` holds it too, under `"training"`). {{ removed }}

```toml
{{ config_toml }}```
"""


class PretrainedLM(
    RecurrentLM,
    PyTorchModelHubMixin,
    library_name="hornn_dist",
    pipeline_tag="text-generation",
    tags=["hornn", "recurrent-neural-network", "word-level", "language-model"],
    model_card_template=CARD,
):
    """A RecurrentLM that saves to and loads from a Hub model folder (config.json, model.safetensors)."""

    def __init__(self, model: ModelConfig, vocab_size: int, plan: LayerPlan | None = None) -> None:
        """model: the [model] section (a dict as read from config.json works too); plan: how the
        HORNN layers run, None = on a CPU without mixed precision (a triton engine runs fused)."""
        cfg = model if isinstance(model, ModelConfig) else ModelConfig(**model)
        cfg.validate()
        super().__init__(cfg, vocab_size, plan or plan_for(cfg, "cpu", strict=False))
        # config.json says what the model is, not where it last ran: no plan in it
        self._hub_mixin_config = {"model": dataclasses.asdict(cfg), "vocab_size": vocab_size}

    def save_pretrained(self, save_directory: Any, **kwargs: Any) -> Any:
        """Save as the mixin does, then write checksums.json of the folder's checked files."""
        result = super().save_pretrained(save_directory, **kwargs)
        folder = Path(save_directory)
        # safetensors writes its file 0600; give it the mode config.json got (the umask's)
        os.chmod(folder / WEIGHTS, stat.S_IMODE((folder / CONFIG).stat().st_mode))
        write_checksums(folder, [name for name in CHECKED if (folder / name).is_file()])
        return result

    @classmethod
    def _from_pretrained(cls, *, strict: bool = True, **kwargs: Any) -> "PretrainedLM":
        """Check config.json and the weights against checksums.json, then load the weights
        strictly (the mixin's default is not) and without its print to stdout."""
        verify_model_folder(_folder_of(kwargs), (CONFIG, WEIGHTS))
        with contextlib.redirect_stdout(io.StringIO()):  # "Loading weights from local directory"
            return super()._from_pretrained(strict=strict, **kwargs)


def verify_model_folder(folder: Path, names: tuple[str, ...]) -> None:
    """Raise CheckpointError naming the file unless the named files of a model folder match
    its checksums.json."""
    problem = checksums_problem(folder, deep=True, required=names, only=names)
    if problem is not None:
        raise CheckpointError(f"model folder {folder} is damaged: {problem}; {REEXPORT}")


def _folder_of(hub: dict[str, Any]) -> Path:
    """Return the local folder of `from_pretrained`'s model: the folder given, or the Hub
    snapshot holding checksums.json and the weights (downloaded first)."""
    if os.path.isdir(hub["model_id"]):
        return Path(hub["model_id"])
    where = {k: hub[k] for k in ("revision", "cache_dir", "force_download", "token")}
    where["local_files_only"] = hub["local_files_only"]
    try:
        table = hf_hub_download(repo_id=hub["model_id"], filename=CHECKSUMS, **where)
    except EntryNotFoundError:
        raise CheckpointError(
            f"model {hub['model_id']} has no {CHECKSUMS} to verify its files; {REEXPORT}"
        ) from None
    hf_hub_download(repo_id=hub["model_id"], filename=WEIGHTS, **where)
    return Path(table).parent

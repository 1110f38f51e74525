"""The language model as a Hub model folder: `save_pretrained` / `from_pretrained` (huggingface_hub).

    config.json          {"model": the [model] section, "vocab_size": V, ...}
    model.safetensors    the weights
    README.md            the model card (`CARD`)

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
from typing import Any

from huggingface_hub import PyTorchModelHubMixin

from hornn_dist.models.config import ModelConfig
from hornn_dist.models.lm import RecurrentLM
from hornn_dist.models.plan import LayerPlan, plan_for

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

The run's resolved config (`config.json` holds it too, under `"training"`):

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

    @classmethod
    def _from_pretrained(cls, *, strict: bool = True, **kwargs: Any) -> "PretrainedLM":
        """Load the weights strictly (the mixin's default is not) and without its print to stdout."""
        with contextlib.redirect_stdout(io.StringIO()):  # "Loading weights from local directory"
            return super()._from_pretrained(strict=strict, **kwargs)

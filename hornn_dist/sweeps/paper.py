"""The paper's numbers (Soltani & Jiang 2016, Tables 2 and 3, the text8 table, Figure 4) and the
paper's name for the model a run trains.

Every number is a test perplexity copied from the paper ("Higher Order Recurrent Neural
Networks", Soltani & Jiang 2016, its LaTeX source):
PTB with 400 hidden units, text8 with 500 (§4). Figure 4 (FOFE HORNN against α) has no numbers
in the source, only its conclusion, kept here as text.
"""

from __future__ import annotations

from dataclasses import dataclass

from hornn_dist.config import RunConfig
from hornn_dist.models.poolings import get_pooling

HIDDEN_SIZE = {"ptb": 400, "text8": 500}  # §4: "400 nodes ... PTB ... 500 ... text8"
CORPUS = {"ptb": "PTB", "text8": "text8"}

# Table 2: PTB test perplexity by pooling and order (a pooling the paper has not: no number)
PTB_BY_ORDER: dict[str, dict[int, float]] = {
    "sum": {2: 111, 3: 108, 4: 109},
    "max": {2: 110, 3: 109, 4: 108},
    "fofe": {2: 103, 3: 101, 4: 100},
    "gated": {2: 102, 3: 100, 4: 100},
}

# Table 3 (PTB) and the text8 table: model -> test perplexity; the HORNNs are 3rd order
SUMMARY: dict[str, dict[str, float]] = {
    "ptb": {
        "KN 5-gram": 141,
        "RNN": 123,  # also Table 2's caption: the 1st-order HORNN
        "LSTM": 117,
        "Stack RNN": 110,
        "Deep RNN": 107,
        "FOFE-FNN": 108,
        "HORNN (3rd order)": 108,
        "Max HORNN (3rd order)": 109,
        "FOFE HORNN (3rd order)": 101,
        "Gated HORNN (3rd order)": 100,
    },
    "text8": {
        "RNN": 184,
        "LSTM": 156,
        "SCRNN": 161,
        "E2E Mem Net": 147,
        "HORNN (3rd order)": 172,
        "Max HORNN (3rd order)": 163,
        "FOFE HORNN (3rd order)": 154,
        "Gated HORNN (3rd order)": 144,
    },
}

# Figure 4 (3rd-order FOFE HORNN on PTB, α from 0.2 to 0.9): no numbers in the source
ALPHA_BEST = (0.5, 0.7)
ALPHA_USED = 0.6
ALPHA_NOTE = (
    "Paper (Figure 4, 3rd-order FOFE HORNN on PTB): the figure has no numbers in the source; "
    "FOFE works best for α between 0.5 and 0.7, and α = 0.6 is used in every other experiment."
)


@dataclass(frozen=True)
class PaperModel:
    """The paper's name for the model of a run, and where it sits in Table 2."""

    label: str  # "FOFE HORNN (3rd order)", "RNN", "LSTM", "RNN (nn.RNN)", "GRU"
    pooling: str = ""  # sum | max | fofe | gated for a HORNN of order 2 or more, else ""
    order: int = 0  # N of a HORNN (1: the paper's RNN, one feedback path); 0 for other archs

    @property
    def is_hornn(self) -> bool:
        """Return whether this is a HORNN of order 2 or more (a row of Table 2)."""
        return bool(self.pooling)

    @property
    def is_rnn(self) -> bool:
        """Return whether this is the paper's RNN: a HORNN with one feedback path."""
        return self.order == 1


def ordinal(n: int) -> str:
    """Return "1st", "2nd", "3rd", "4th", ... for n."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def paper_model(config: RunConfig) -> PaperModel:
    """Return the paper's model for a run config: a HORNN of order 1 is the paper's RNN."""
    model = config.model
    if model.arch == "hornn":
        if model.order == 1:
            return PaperModel("RNN", order=1)
        label = f"{get_pooling(model.pooling).label} ({ordinal(model.order)} order)"
        return PaperModel(label, model.pooling, model.order)
    return PaperModel({"lstm": "LSTM", "rnn": "RNN (nn.RNN)", "gru": "GRU"}[model.arch])


def paper_ppl(model: PaperModel, paper: str) -> float | None:
    """Return the paper's test perplexity of `model` on `paper` (ptb | text8), else None."""
    if paper == "ptb" and model.is_hornn:
        return PTB_BY_ORDER.get(model.pooling, {}).get(model.order)
    return SUMMARY.get(paper, {}).get(model.label)


def paper_cell(config: RunConfig, paper: str) -> str | None:
    """Return the paper's test perplexity for a run on the paper's corpus (`data.preset`) at its
    hidden size, as text, marking the numbers its summary table borrowed from other papers
    (every model but its HORNNs); None where the run is not in the paper's setting."""
    model = config.model
    if config.data.preset != paper or model.hidden_size != HIDDEN_SIZE.get(paper):
        return None
    paper_run = paper_model(config)
    ppl = paper_ppl(paper_run, paper)
    if ppl is None:
        return None
    return f"{ppl:g}" if paper_run.is_hornn else f"{ppl:g} (borrowed)"


def paper_column(paper: str) -> str:
    """Return the header of the paper's column, e.g. "paper (PTB, H 400)"."""
    return f"paper ({CORPUS[paper]}, H {HIDDEN_SIZE[paper]})"


def other_baselines(paper: str, shown: set[str]) -> dict[str, float]:
    """Return the paper's models of its summary table that are not among the labels `shown`."""
    return {label: ppl for label, ppl in SUMMARY.get(paper, {}).items() if label not in shown}

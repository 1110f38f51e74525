"""Sample text from a checkpoint: `python -m hornn_dist.generate RUN_OR_CHECKPOINT --prompt "the king"`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import torch

from hornn_dist.config import KEYS_HELP
from hornn_dist.run.loading import MODEL_ARG_HELP, load_model_for, open_vocabulary, resolve_trained
from hornn_dist.runtime import build_accelerator, run_cli, setup_logging
from hornn_dist.util.errors import ConfigError

STREAMS = 1  # one sampled sequence
# the logits divided by the temperature stay finite in float32 (1e-45 made them inf); 0 means greedy
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-3, 1e3
MAX_TOKENS = 100_000  # words a call samples: a long book chapter, minutes on a CPU


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the parsed command line."""
    parser = argparse.ArgumentParser(
        epilog=KEYS_HELP, prog="hornn_dist.generate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("checkpoint", help=MODEL_ARG_HELP)
    parser.add_argument(
        "--prompt",
        default="",
        help="text to continue, read with the corpus's own settings (lowercase, <eos> per line); "
        "words outside the vocabulary become <unk>, with a warning naming them",
    )
    parser.add_argument(
        "--tokens",
        type=int,
        default=50,
        help=f"number of words to sample, printed as they come (default: 50, at most {MAX_TOKENS:,})",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.8,
        help="softmax temperature, 0.001 to 1000; 0 = greedy, the most likely word each time "
        "(default: 0.8)",
    )
    parser.add_argument(
        "--top-k",
        type=int,
        default=40,
        help="sample from the k most likely words (0 = all; default: 40)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="random seed: the same seed gives the same text (default: a fresh one, printed)",
    )
    return parser.parse_args(argv)


def sample(
    model: torch.nn.Module,
    prompt_ids: list[int],
    tokens: int,
    temperature: float,
    top_k: int,
    generator: torch.Generator,
    device: torch.device,
) -> Iterator[int]:
    """Yield `tokens` word ids, each as soon as it is sampled, after feeding the prompt through
    the model (temperature 0: the most likely word each time, as top_k 1)."""
    with torch.no_grad():
        state = model.init_state(STREAMS, device)
        context = torch.tensor(prompt_ids, dtype=torch.long, device=device).view(-1, STREAMS)
        logits, state = model(context, state)  # context: (T, 1)
    for n in range(tokens):
        scores = logits[-1, 0].float()  # (V,)
        if temperature == 0:  # greedy, as Hugging Face's generate(do_sample=False)
            top_k = 1
        else:
            scores = scores / temperature
        if top_k > 0:
            kth = torch.topk(scores, min(top_k, scores.numel())).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        probs = torch.softmax(scores, dim=-1).cpu()
        next_id = int(torch.multinomial(probs, 1, generator=generator))
        yield next_id
        if n + 1 == tokens:  # the last word: no pass for a word after it
            return
        with torch.no_grad():
            logits, state = model(torch.tensor([[next_id]], device=device), state)


def is_greedy(temperature: float, top_k: int) -> bool:
    """Return whether sampling picks the likeliest word every time (no seed changes the text)."""
    return temperature == 0 or top_k == 1


def print_words(words: Iterator[str], start: str, out: TextIO) -> None:
    """Write `start`, then each word as it comes (flushed): words joined by spaces, each decoded
    <eos> ("\\n") as a line end, so that every word drawn shows (a text of <eos> alone is
    blank lines, not nothing); the output ends with one line end."""
    out.write(start)
    last = start[-1:]
    for word in words:
        if word != "\n" and last and last != "\n":
            out.write(" ")
        out.write(word)
        out.flush()
        last = word[-1:]
    if last != "\n":
        out.write("\n")
    out.flush()


def check_utf8_prompt(prompt: str) -> None:
    """Raise ConfigError naming the first byte of `prompt` that is not UTF-8 (a command line
    of another encoding reaches Python as such bytes, which no tokenizer reads)."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as err:
        raw = _as_typed(prompt[err.start : err.end])
        raise ConfigError(
            f"--prompt is not UTF-8 text: byte {' '.join(f'0x{b:02x}' for b in raw)} at "
            f"character {err.start + 1} of {_as_typed(prompt)!r}; pass the prompt as UTF-8 "
            "(e.g. through `iconv -t utf-8`)"
        ) from None


def _as_typed(text: str) -> bytes:
    """Return the bytes a command line gave as `text` (Python keeps the bytes that are not
    UTF-8 as surrogates)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no command line gives: shown escaped
        return text.encode("utf-8", "backslashreplace")


def encode_prompt(corpus: Any, prompt: str) -> tuple[list[int], list[str]]:
    """Return the prompt's ids, read as the corpus's text was (its tokenizer.json applies the
    corpus's lowercase and <eos> settings), and its distinct words outside the vocabulary, as typed."""
    encoding = corpus.tokenizer().encode(prompt)
    typed = [prompt[start:end] for start, end in encoding.offsets]
    unknown = [
        word for word, i in zip(typed, encoding.ids, strict=True) if i == 0 and word != "<unk>"
    ]
    return list(encoding.ids), list(dict.fromkeys(unknown))


def unknown_words_warning(unknown: list[str], vocab: dict[str, int]) -> str:
    """Return the one-line warning that names the prompt's words outside the vocabulary."""
    line = f"warning: --prompt words not in the vocabulary, read as <unk>: {', '.join(map(repr, unknown))}"
    lower = [w.lower() for w in unknown if w.lower() != w and w.lower() in vocab]
    if lower:
        line += f" (the vocabulary has them in lowercase: {', '.join(map(repr, lower))})"
    return line


def main(argv: list[str] | None = None) -> int:
    """Print text sampled from a checkpoint; return the exit code."""
    args = parse_args(argv)
    if not 1 <= args.tokens <= MAX_TOKENS:
        raise ConfigError(f"--tokens must be between 1 and {MAX_TOKENS:,}, got {args.tokens}")
    if args.temperature != 0 and not MIN_TEMPERATURE <= args.temperature <= MAX_TEMPERATURE:
        raise ConfigError(
            f"--temperature must be 0 (greedy) or between {MIN_TEMPERATURE:g} (nearly always "
            f"the likeliest word) and {MAX_TEMPERATURE:g} (nearly uniform), got {args.temperature}"
        )
    if args.seed is not None and not 0 <= args.seed < 2**64:
        raise ConfigError(f"--seed must be between 0 and 2**64 - 1, got {args.seed}")
    if args.top_k < 0:
        raise ConfigError(f"--top-k must be >= 0 (0 = all words), got {args.top_k}")
    check_utf8_prompt(args.prompt)
    setup_logging(True)  # resolving `best` says on stderr which checkpoint it picked
    folder, cfg = resolve_trained(args.checkpoint)
    accelerator = build_accelerator("no")  # sampling runs in fp32, whatever the run trained in
    corpus = open_vocabulary(folder, cfg, accelerator)  # no shard read
    model = load_model_for(folder, cfg, corpus, accelerator, STREAMS)
    prompt_ids, unknown = encode_prompt(corpus, args.prompt)
    vocab = corpus.tokenizer().get_vocab()
    if unknown:
        print(unknown_words_warning(unknown, vocab), file=sys.stderr)
    if prompt_ids and not any(prompt_ids):  # every word read as <unk> (id 0)
        print(
            "warning: no word of --prompt is in the vocabulary: the text follows <unk> only, "
            "not the prompt",
            file=sys.stderr,
        )
    if not prompt_ids:
        has_eos = "<eos>" in vocab
        if args.prompt:
            start = "as after a line end" if has_eos else "from <unk>"
            print(
                f"warning: --prompt {args.prompt!r} holds no word as the corpus reads text: the "
                f"text starts {start}",
                file=sys.stderr,
            )
        prompt_ids = [vocab["<eos>"]] if has_eos else [0]
    seed = args.seed
    if is_greedy(args.temperature, args.top_k):
        if seed is not None:
            print(
                "note: --seed does nothing here: "
                + ("--temperature 0" if args.temperature == 0 else "--top-k 1")
                + " picks the likeliest word each time",
                file=sys.stderr,
            )
        seed = 0  # nothing is drawn
    elif seed is None:  # a fresh draw, said so that the text can be sampled again
        seed = int.from_bytes(os.urandom(4), "little") >> 1
        print(f"seed {seed} (--seed {seed} samples this text again)", file=sys.stderr)
    generator = torch.Generator().manual_seed(seed)
    ids = sample(
        model, prompt_ids, args.tokens, args.temperature, args.top_k, generator, accelerator.device
    )
    print_words((corpus.decode([i]) for i in ids), args.prompt.strip(), sys.stdout)
    return 0


def cli() -> None:
    """Console-script entry point (`hornn-generate`): the same as `python -m hornn_dist.generate`."""
    run_cli(main)


if __name__ == "__main__":
    cli()

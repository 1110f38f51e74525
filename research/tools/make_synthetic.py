"""Write a generated corpus with long-range structure, a second corpus to choose recipes on.

    python -m research.tools.make_synthetic OUT_DIR [--train-words 300000] [--seed 1]

Each paragraph draws a topic that stays for all its sentences; each word depends on the
previous word (a sparse bigram table) and on the topic (a topic's own words are favoured), over
a Zipf-shaped vocabulary. A model that carries the topic across many steps beats one that only
sees the last word, which is what HORNN's extra feedback paths are for. Writes
train.txt, valid.txt and test.txt (one sentence a line), all from one seeded generator.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from hornn_dist.util.files import write_text

VOCAB = 3000
TOPICS = 20
TOPIC_WORDS = 120  # words each topic favours
FOLLOWERS = 12  # words that may follow a given word


class TopicBigramLanguage:
    """A seeded generator of paragraphs: a topic per paragraph, a bigram table per word."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.rng = rng
        self.words = [f"w{i}" for i in range(VOCAB)]
        zipf = [1.0 / (rank + 1) for rank in range(VOCAB)]
        self.followers = [rng.choices(range(VOCAB), weights=zipf, k=FOLLOWERS) for _ in self.words]
        self.topics = [rng.sample(range(VOCAB), TOPIC_WORDS) for _ in range(TOPICS)]

    def sentence(self, topic: int) -> str:
        """Return one sentence of 5 to 20 words about `topic`."""
        rng, out = self.rng, []
        word = rng.choice(self.topics[topic])
        for _ in range(rng.randint(5, 20)):
            out.append(self.words[word])
            if rng.random() < 0.45:  # a topic word, whatever came before
                word = rng.choice(self.topics[topic])
            else:
                word = rng.choice(self.followers[word])
        return " ".join(out)

    def paragraph(self) -> list[str]:
        """Return the sentences of one paragraph (one topic)."""
        topic = self.rng.randrange(TOPICS)
        return [self.sentence(topic) for _ in range(self.rng.randint(3, 8))]

    def text(self, words: int) -> str:
        """Return whole paragraphs, one sentence a line, until `words` words are written."""
        lines: list[str] = []
        count = 0
        while count < words:
            for line in self.paragraph():
                lines.append(line)
                count += len(line.split())
        return "\n".join(lines) + "\n"


def write_corpus(out: Path, train_words: int, seed: int) -> None:
    """Write train.txt, valid.txt and test.txt (a tenth of train each) into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    language = TopicBigramLanguage(seed)
    for split, words in (
        ("train", train_words),
        ("valid", train_words // 10),
        ("test", train_words // 10),
    ):
        write_text(out / f"{split}.txt", language.text(words))


def main(argv: list[str] | None = None) -> None:
    """Write the generated corpus from the command line."""
    parser = argparse.ArgumentParser(prog="research.tools.make_synthetic", description=__doc__)
    parser.add_argument("out", type=Path, help="folder for train.txt, valid.txt, test.txt")
    parser.add_argument("--train-words", type=int, default=300_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    write_corpus(args.out, args.train_words, args.seed)


if __name__ == "__main__":
    main()

"""Rebuild the bundled demo corpus (King James Bible) from Debian's `bible-kjv` package.

Usage (needs `apt-get install bible-kjv`; writes demo.{train,valid,test}.txt.gz here):

    bible "Gen1:1-Rev22:21" > kjv.txt
    python hornn_dist/corpora/make_demo.py kjv.txt

Normalisation: one verse per line; lowercase; words are runs of letters; a possessive
"'s" becomes its own token as in the Penn Treebank ("god 's"); verse numbers, other
digits and punctuation are dropped. Split: the verses in contiguous blocks of 200,
block k goes to valid when k % 20 == 18, to test when k % 20 == 19, else to train
(90/5/5, every part of the book in every split). gzip with mtime 0, so reruns are
byte-identical.
"""

from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

from hornn_dist.util.files import atomic_writer

VERSE = re.compile(r"^\s+(\d+) (.*)$")
HEADING = re.compile(r"^\S.* \d+$")
WORD = re.compile(r"[a-z]+|'s\b")
BLOCK = 200


def read_verses(path: Path) -> list[str]:
    """Return the verse texts of a `bible` printout, continuation lines joined."""
    verses: list[str] = []
    previous_blank = True
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.rstrip()
        if not line:
            previous_blank = True
            continue
        match = VERSE.match(line)
        if match:
            verses.append(match.group(2))
        elif previous_blank and HEADING.match(line):
            pass  # "Genesis 1": a chapter heading
        elif verses:
            verses[-1] += " " + line
        previous_blank = False
    return verses


def normalise(verse: str) -> str:
    """Return the verse as lowercase word tokens separated by single spaces."""
    return " ".join(WORD.findall(verse.lower()))


def main(argv: list[str]) -> None:
    """Write demo.{train,valid,test}.txt.gz next to this script from a `bible` printout."""
    verses = [normalise(v) for v in read_verses(Path(argv[0]))]
    splits: dict[str, list[str]] = {"train": [], "valid": [], "test": []}
    for i, verse in enumerate(verses):
        block = (i // BLOCK) % 20
        name = "valid" if block == 18 else "test" if block == 19 else "train"
        splits[name].append(verse)
    here = Path(__file__).resolve().parent
    for name, lines in splits.items():
        data = ("\n".join(lines) + "\n").encode("utf-8")
        out = here / f"demo.{name}.txt.gz"
        with (
            atomic_writer(out) as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f,
        ):
            f.write(data)
        words = sum(len(line.split()) for line in lines)
        print(f"{out.name}: {len(lines)} lines, {words} words, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])

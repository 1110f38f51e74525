"""Write the UD English Web Treebank's words as a language-modelling corpus (one sentence a line).

    python research/corpora/ewt/make_ewt.py UD_English-EWT/ research/corpora/ewt/

Reads the treebank's per-document sources (`not-to-release/sources/`) in the order of its split
lists (`not-to-release/file-lists/files.{train,dev,test}`): the released `en_ewt-ud-dev.conllu`
and `-test.conllu` are these documents in this order (their sentences are equal, checked below),
and the released train file is too large for some mirrors. A sentence is its word forms (the
FORM column, multi-word token ranges and empty nodes left out) joined by spaces, as written:
case and punctuation as the treebank has them (the sweep's [corpora] entry lowercases).
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

SPLITS = {"train": "train", "valid": "dev", "test": "test"}


def sentences(conllu: str) -> list[list[str]]:
    """Return the word forms of each sentence of a CoNLL-U text."""
    out: list[list[str]] = []
    words: list[str] = []
    for line in conllu.splitlines():
        if not line.strip():
            if words:
                out.append(words)
                words = []
        elif not line.startswith("#"):
            cols = line.split("\t")
            if "-" not in cols[0] and "." not in cols[0]:
                words.append(cols[1])
    if words:
        out.append(words)
    return out


def texts(conllu: str) -> list[str]:
    """Return the `# text = ` lines of a CoNLL-U text."""
    return [
        line[len("# text = ") :] for line in conllu.splitlines() if line.startswith("# text = ")
    ]


def main(treebank: Path, out: Path) -> None:
    """Write out/en_ewt.{train,valid,test}.txt.gz from a UD_English-EWT checkout."""
    for ours, theirs in SPLITS.items():
        names = (treebank / "not-to-release/file-lists" / f"files.{theirs}").read_text().split()
        docs = [(treebank / "not-to-release/sources" / n).read_text("utf-8") for n in names]
        released = treebank / f"en_ewt-ud-{theirs}.conllu"
        if released.is_file():  # the sources in list order are the released split
            assert texts(released.read_text("utf-8")) == [t for d in docs for t in texts(d)]
        lines = [" ".join(s) for d in docs for s in sentences(d)]
        target = out / f"en_ewt.{ours}.txt.gz"
        with gzip.GzipFile(target, "wb", mtime=0) as f:  # mtime 0: the same bytes every time
            f.write(("\n".join(lines) + "\n").encode("utf-8"))
        words = sum(len(line.split()) for line in lines)
        print(f"{target}: {len(lines):,} sentences, {words:,} words")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

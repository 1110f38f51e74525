"""docs/config.md written from the config dataclasses: every key, its default and its meaning.

The meaning of a key is its field's comment in the source, the only place it is written: the
comment lines right above the field, then the comment at the end of its line. So
`python -m hornn_dist.config_docs` rewrites docs/config.md, and `--check` (run by the tests)
exits 1 when the file differs from what the code says.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import sys
import textwrap
import tokenize
from pathlib import Path

from hornn_dist.config import _SECTION_TYPES, SECTIONS, toml_value
from hornn_dist.util.files import write_text

DOC = Path(__file__).resolve().parent.parent / "docs" / "config.md"

INTRO = """\
# Configuration

<!-- Written by `python -m hornn_dist.config_docs` from the config dataclasses and their
comments (hornn_dist/config.py, data/config.py, models/config.py); edit those, not this file. -->

A run is one TOML file with five sections; any key can be overridden with
`--set section.key=value` (values are TOML: `--set data.train='["a.txt", "b.txt"]'`). A wrong
key, type or value stops with one line naming the key and what is allowed; numbers have upper
bounds far past any model that trains (`optim.lr` <= 1000, `model.order` <= 4096, sizes <= 2^20,
`train.collective_timeout` <= one week). Before its first step a run also refuses a model whose
weights, gradients, momentum, the optimizer's and the final scoring's copies (20 bytes a
parameter), one step's activations (the HORNN scan keeps order² x batch x hidden values) and
128 MiB for the rest of the run do not fit in the memory free to it: the GPU's, or the smaller
of the machine's and its container's (cgroup v1 or v2 limit; in a real 512 MiB cgroup the
largest size it accepts trains to the end: [Speed and precision](performance.md#numbers-behind-the-codes-choices)). The resolved config is written to
`output_dir/config.toml` and into every checkpoint. A file may start with `base = "other.toml"` (a path relative to
it): every key it leaves out is the base file's, so a model's recipe that differs from
another's in a few keys holds only those (`configs/text8_lstm.toml`).
"""


def field_comments(cls: type) -> dict[str, str]:
    """Return each field of a dataclass mapped to its comment: the lines above, then its line's."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, str] = {}  # line number -> comment text
    code_lines: set[int] = set()  # lines holding anything but a comment
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.update(range(token.start[0], token.end[0] + 1))
    found = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = []
        line = node.lineno - 1
        while line in comments and line not in code_lines:  # a comment line of its own
            above.insert(0, comments[line])
            line -= 1
        parts = above + [
            comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments
        ]
        found[node.target.id] = " ".join(parts)
    return found


def _cell(text: str) -> str:
    """Return text that fits in one Markdown table cell."""
    return text.replace("|", "\\|")


def render() -> str:
    """Return docs/config.md: the introduction, then one table of keys per section."""
    out = [INTRO]
    for section in SECTIONS:
        cls = _SECTION_TYPES[section]
        defaults = cls()
        meanings = field_comments(cls)
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        out += [f"## `[{section}]`", "", doc, "", "| key | default | meaning |", "|---|---|---|"]
        for item in dataclasses.fields(cls):
            meaning = meanings.get(item.name, "")
            if not meaning:
                raise SystemExit(
                    f"error: {cls.__name__}.{item.name} has no comment; write its meaning as a "
                    f"comment above it or at the end of its line ({inspect.getsourcefile(cls)})"
                )
            default = toml_value(getattr(defaults, item.name))
            out.append(f"| `{item.name}` | `{_cell(default)}` | {_cell(meaning)} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Write docs/config.md, or with --check report whether it is up to date; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m hornn_dist.config_docs", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/config.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.is_file() or DOC.read_text(encoding="utf-8") != text:
            print(f"error: {DOC} is stale; run: python -m hornn_dist.config_docs", file=sys.stderr)
            return 1
        return 0
    write_text(DOC, text)  # atomic, never through a link, as every file the project writes
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

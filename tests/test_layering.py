"""The package's import graph has no cycle: every import of a hornn_dist module by another,
function-level (lazy) imports included, read from the source with ast. And the product never
reaches into the search behind its recipes (research/): that imports the product, never the
reverse."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Return every module of the package under `root`: dotted name -> file."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported(
    name: str, path: Path, node: ast.Import | ast.ImportFrom, modules: set[str]
) -> set[str]:
    """Return the package's modules one import statement of module `name` (in `path`) loads."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1 more
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    found = set()
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:  # `from package import submodule`
            found.add(f"{base}.{alias.name}")
        elif base in modules:  # a name defined in the module (or package __init__)
            found.add(base)
    return found


def all_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Return every import statement of a module: at top level, in functions, under `if`, and
    under `if TYPE_CHECKING:` too (a type-only import still ties two modules into a circle)."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Return module -> the package's modules it imports (`all_imports`), itself left out."""
    files = module_files(root, package)
    graph = {}
    for name, path in files.items():
        edges = set()
        for node in all_imports(ast.parse(path.read_text(), str(path))):
            edges |= imported(name, path, node, set(files))
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """Return one cycle of the graph as a path [a, b, ..., a], or None."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_package_import_graph_has_no_cycle() -> None:
    graph = import_graph(REPO, "hornn_dist")
    assert "hornn_dist.models.precision" in graph["hornn_dist.models.recurrence"]
    assert "hornn_dist.models.triton_scan" in graph["hornn_dist.models.plan"]  # a lazy import
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .b import g\n")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def g():\n    from ..a import x\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub"] == {"pkg.sub.b"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.a"]
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import x\n"
    )
    assert find_cycle(import_graph(tmp_path, "pkg")) == ["pkg.a", "pkg.sub.b", "pkg.a"]
    (package / "sub" / "b.py").write_text("x = 1\n")
    assert find_cycle(import_graph(tmp_path, "pkg")) is None


def test_the_top_level_holds_the_commands_and_the_run_config_alone() -> None:
    top = sorted(p.name for p in (REPO / "hornn_dist").glob("*.py"))
    assert len(top) <= 12, top
    assert {"train.py", "prepare.py", "evaluate.py", "generate.py", "export.py"} <= set(top)
    assert {"sweep.py", "report.py", "launch.py", "config.py"} <= set(top)


def test_no_two_modules_share_a_name_but_a_layers_config() -> None:
    names: dict[str, list[str]] = {}
    for path in (REPO / "hornn_dist").rglob("*.py"):
        if path.name not in ("__init__.py", "config.py"):
            names.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    twins = {name: where for name, where in names.items() if len(where) > 1}
    assert not twins, twins


def test_the_product_never_names_the_search() -> None:
    """No module of the package, config, launch file, benchmark script or product test names a
    path under research/ (its records, sweeps, tools) or imports from it, so that the product
    runs, and passes its tests, without it (the docs may cite its records)."""
    named = re.compile(r"\bresearch[/.]")
    files = [p for root in ("hornn_dist", "tests") for p in (REPO / root).rglob("*.py")]
    files += [*(REPO / "configs").rglob("*.toml"), *(REPO / "launch").iterdir()]
    files += [*(REPO / "benchmarks").glob("*.py"), *(REPO / "benchmarks").glob("*.sh")]
    me = Path(__file__).resolve()
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in files
        if path.is_file() and path.resolve() != me and "__pycache__" not in path.parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if named.search(line)
    ]
    assert not found, "\n".join(found)

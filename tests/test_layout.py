"""The library's house: packages by concern on floors, every import going down, no cycles.

The import graph is read from the sources (``ntkbook.codehash.imported_modules``: module-level
and function-level imports alike), so this test sees what ``import`` would run.
"""

from __future__ import annotations

from pathlib import Path

from ntkbook.codehash import imported_modules

LIB = Path(__file__).resolve().parents[1] / "lib"

#: floor of each room (a package or a top-level module); a room may import only from lower floors
#: and from itself
FLOORS = {
    "paths": 0, "progress": 0, "numbers": 0, "codehash": 0, "errors": 0,
    "store": 1, "data": 1, "train": 1, "stats": 1, "verdicts": 1, "validate": 1,
    "ntk": 2,
    "models": 3,
    "gemma": 4, "influence": 4, "lazy": 4,
    "experiments": 5,
    "freshness": 6, "claims": 6,
    "plotting": 7, "book": 7,
    "__main__": 8,
}


def _modules() -> list[str]:
    out = []
    for path in sorted((LIB / "ntkbook").rglob("*.py")):
        parts = path.relative_to(LIB).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append(".".join(parts))
    return out


def _room(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    # package __init__ files reached only because a submodule is imported are not edges
    return {m: {d for d in imported_modules(m, LIB) if d != "ntkbook" and d in mods and
                not (d.count(".") == 1 and _room(d) != "experiments" and _room(d) != _room(m)
                     and (LIB / d.replace(".", "/") / "__init__.py").exists()
                     and _is_docstring_only(d))}
            for m in mods}


def _is_docstring_only(package: str) -> bool:
    import ast

    tree = ast.parse((LIB / package.replace(".", "/") / "__init__.py").read_text())
    return all(isinstance(n, ast.Expr) and isinstance(getattr(n, "value", None), ast.Constant)
               for n in tree.body)


def test_every_room_has_a_floor():
    rooms = {_room(m) for m in _modules()} - {""}
    assert rooms <= set(FLOORS), f"rooms without a floor: {sorted(rooms - set(FLOORS))}"


def test_imports_only_go_down():
    up = []
    for mod, deps in _graph().items():
        if mod == "ntkbook":
            continue
        for dep in deps:
            a, b = _room(mod), _room(dep)
            if a != b and FLOORS[b] >= FLOORS[a]:
                up.append(f"{mod} -> {dep} (floor {FLOORS[a]} -> {FLOORS[b]})")
    assert not up, "imports that do not go down:\n" + "\n".join(sorted(up))


def test_no_experiment_imports_another():
    bad = [f"{m} -> {d}" for m, deps in _graph().items() if m.startswith("ntkbook.experiments.")
           for d in deps if d.startswith("ntkbook.experiments.")]
    assert not bad, "experiments importing experiments (share code through a concern package):\n" + "\n".join(bad)


def test_no_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(dep):] + [dep]))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_gemma_and_influence_paths_stay_in_their_packages():
    """The Gemma stack and the influence stack live in their packages, not beside the engine."""
    top = {m for m in _modules() if m.count(".") == 1}
    stray = {m for m in top if any(w in m for w in ("gemma", "influence", "attack", "probe", "tokenizer",
                                                     "landscape", "pos_data"))}
    assert stray <= {"ntkbook.gemma", "ntkbook.influence"}, sorted(stray)


def _comment_lines(path: Path) -> tuple[set[int], set[int]]:
    """Lines holding a comment, and lines holding only a comment."""
    import io
    import tokenize

    source = path.read_text()
    lines = source.splitlines()
    any_comment = {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                   if tok.type == tokenize.COMMENT}
    return any_comment, {n for n in any_comment if lines[n - 1].lstrip().startswith("#")}


def test_every_experiment_documents_its_config_and_run():
    """A docstring on every ``Config`` and ``run``, a comment on every ``Config`` field (on its line,
    or a ``#:`` line right above it), as the flax examples do."""
    import ast

    missing = []
    for path in sorted((LIB / "ntkbook" / "experiments").glob("[!_]*.py")):
        tree = ast.parse(path.read_text())
        comments, comment_only = _comment_lines(path)
        nodes = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        for name in ("Config", "run"):
            if name not in nodes:
                missing.append(f"{path.name}: no {name}")
            elif not ast.get_docstring(nodes[name]):
                missing.append(f"{path.name}: {name} has no docstring")
        for field in getattr(nodes.get("Config"), "body", []):
            if isinstance(field, ast.AnnAssign):
                own = set(range(field.lineno, (field.end_lineno or field.lineno) + 1))
                if not (own & comments or field.lineno - 1 in comment_only):
                    missing.append(f"{path.name}: Config.{field.target.id} has no comment")
    assert not missing, "\n".join(missing)

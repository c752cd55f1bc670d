"""Fail when modules of a package import each other in a cycle, or a layer imports one above it
(run by ``make lint``).

Usage: ``python scripts/check_imports.py [--count KIND] [SRC_DIR [PACKAGE]]`` (default
``src stalkd``, ``--count import-time``).

Imports come in three kinds, each including the one before:

- ``import-time``: statements that run when the module is imported: at module level,
  including module-level ``if``/``try``/``with`` blocks and class bodies. A cycle here can
  break at run time depending on which module is imported first.
- ``deferred``: also imports inside functions (run later, often to dodge such a cycle).
- ``typing``: also imports under ``if TYPE_CHECKING:`` (read only by mypy).

Cycles of the ``--count`` kind are printed and make the exit status 1; cycles that appear only
when the weaker kinds are counted too are printed as notes, exit status unchanged.
``from pkg import name`` depends on the module ``pkg.name`` when there is one, else on ``pkg``
itself (its ``__init__``). Importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``;
those implicit edges are left out, as every layered package would otherwise be one cycle.
Each strongly connected group of modules is printed with one shortest cycle through it and
every import edge inside it (the edges to cut).

Layers: for ``stalkd``, :data:`LAYERS` lists its sub-packages (and top-level modules) from the
bottom up. An import of a higher layer from a lower one, of the import-time or deferred kind, is an
upward arrow and fails the check the way a cycle does: a layer must be usable, and testable,
without the ones above it. A sub-package missing from the table fails too, so a new one is placed
on purpose.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``src/package``."""
    out: dict[str, Path] = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


KINDS = ("import-time", "deferred", "typing")

LAYERS: tuple[tuple[str, ...], ...] = (
    ("stalkd", "stalkd.cyshim", "stalkd.extensions", "stalkd.sourcefirst", "stalkd.pids", "stalkd.secretfile",
     "stalkd.tubes", "stalkd.values"),
    ("stalkd.log",),  # segments, frames, group commit, consumer groups
    ("stalkd.protocol",),  # the beanstalkd grammar: commands and replies as values
    ("stalkd.engine",),  # the job semantics, a pure state machine
    ("stalkd.persist",),  # the engine made durable: WAL, snapshots, compaction, recovery
    ("stalkd.archive",),  # shipping the log to object storage
    ("stalkd.client", "stalkd.ha"),  # the clients; the etcd lease
    ("stalkd.replication",),  # primary and standbys
    ("stalkd.server",),  # the protocol over asyncio
    ("stalkd.worker",),  # tasks over the client
    ("stalkd.outbox", "stalkd.admin", "stalkd.spark"),  # built over the layers below
    ("stalkd.node", "stalkd.cli"),  # the composition root: the commands that wire every layer
)
"""``stalkd``'s layers from the bottom up; the names on one row may not import each other."""


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> tuple[int, str] | None:
    """(rank, unit) of ``module``: the longest table entry that is the module or a package holding it."""
    best: tuple[int, str] | None = None
    for rank, row in enumerate(layers):
        for unit in row:
            inside = module.startswith(unit + ".") and unit != "stalkd"  # the root holds only itself
            if (module == unit or inside) and (best is None or len(unit) > len(best[1])):
                best = (rank, unit)
    return best


def upward_arrows(edges: dict[str, dict[str, int]], weakest: int = 1) -> list[str]:
    """Every import from a lower layer to a higher one (or across one row), of kind ``weakest`` or
    stronger, and every module in no layer, as lines to print."""
    problems = []
    for name in sorted(edges):
        here = layer_of(name)
        if here is None:
            problems.append(f"{name} is in no layer of LAYERS (scripts/check_imports.py)")
            continue
        for target, kind in sorted(edges[name].items()):
            there = layer_of(target)
            if kind > weakest or there is None or there[1] == here[1]:
                continue
            if there[0] > here[0] or (there[0] == here[0] and here[0] > 0):
                problems.append(f"{name} imports {target} ({KINDS[kind]}): {here[1]} is below {there[1]}"
                                if there[0] > here[0] else
                                f"{name} imports {target} ({KINDS[kind]}): {here[1]} and {there[1]} share a row")
    return problems


def import_statements(body: list[ast.stmt], kind: int = 0) -> Iterator[tuple[ast.Import | ast.ImportFrom, int]]:
    """Every import statement in ``body`` with its kind, an index into :data:`KINDS`."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, kind
        elif isinstance(node, ast.If):
            yield from import_statements(node.body, 2 if _is_type_checking(node.test) else kind)
            yield from import_statements(node.orelse, kind)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from import_statements(node.body, max(kind, 1))
        else:  # try/with/for/while/match/class bodies run when reached
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(node, field, []):
                    if isinstance(child, ast.stmt):
                        yield from import_statements([child], kind)
                    else:  # an except handler or a match case: statements in its body
                        yield from import_statements(child.body, kind)


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The package's modules that ``name`` (at ``path``) imports, each with the strongest
    (lowest) kind of import naming it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    out: dict[str, int] = {}

    def add(target: str, kind: int) -> None:
        if target != name:
            out[target] = min(kind, out.get(target, kind))

    for node, kind in import_statements(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    add(alias.name, kind)
            continue
        base = node.module or ""
        if node.level:
            anchor = name.split(".")
            anchor = anchor if is_package else anchor[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            target = f"{base}.{alias.name}"
            if target in modules:
                add(target, kind)
            elif base in modules:
                add(base, kind)
    return out


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the groups of two or more mutually reachable modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return sorted(groups)


def shortest_cycle(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """A shortest import cycle through the group's first module (breadth-first)."""
    members = set(group)
    start = group[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node] & members):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is in a group but on no cycle")


def report(graph: dict[str, set[str]], groups: list[list[str]], edges: dict[str, dict[str, int]],
           modules: dict[str, Path], label: str) -> None:
    for group in groups:
        print(f"{label}: {len(group)} modules, e.g. " + " -> ".join(shortest_cycle(graph, group)))
        members = set(group)
        for name in group:
            for target in sorted(graph[name] & members):
                kind = KINDS[edges[name][target]]
                print(f"  {name} imports {target} ({kind}, {modules[name]})")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--count", choices=KINDS, default=KINDS[0],
                        help="the weakest kind of import whose cycles fail the check")
    parser.add_argument("src", nargs="?", default="src")
    parser.add_argument("package", nargs="?", default="stalkd")
    args = parser.parse_args(argv)
    modules = module_files(Path(args.src), args.package)
    edges = {name: imports_of(name, path, modules) for name, path in modules.items()}
    failing = KINDS.index(args.count)
    seen: set[tuple[str, ...]] = set()
    failed = 0
    for level, kind in enumerate(KINDS):
        graph = {n: {t for t, k in out.items() if k <= level} for n, out in edges.items()}
        groups = [g for g in strongly_connected(graph) if tuple(g) not in seen]
        seen.update(tuple(g) for g in groups)
        if level <= failing:
            failed += len(groups)
            report(graph, groups, edges, modules, f"import cycle ({kind})")
        else:
            report(graph, groups, edges, modules, f"note, not counted: cycle once {kind} imports count")
    arrows = upward_arrows(edges) if args.package == "stalkd" else []
    for line in arrows:
        print(f"upward arrow: {line}")
    if failed or arrows:
        print(f"{failed} import cycle(s) in {args.package} counting {args.count} imports"
              + (f"; {len(arrows)} upward arrow(s)" if arrows else ""))
        return 1
    print(f"no import cycles among {len(modules)} modules of {args.package} "
          f"counting {args.count} imports; no upward arrow between its {len(LAYERS)} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

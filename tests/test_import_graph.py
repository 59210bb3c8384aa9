"""The package's import graph: no module imports itself back through others (imports inside functions
and under TYPE_CHECKING counted), and nothing lower imports anything higher (hardware -> problems ->
constraints -> solver; inside constraints: physics -> core -> rules), and concepts the search and the
diagnosis share have one home each (the CP-SAT solver setup, the rule set of a problem)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

from parasol.constraints.rules.registry import active_constraints
from parasol.problems.loader import load_problem

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"parasol": "parasol", "hardware": "parasol.hardware", "problems": "parasol.problems",
            "constraints": "parasol.constraints", "solver": "parasol.solver"}
LAYERS = ("parasol.hardware", "parasol.problems", "parasol.constraints", "parasol.solver")
CONSTRAINT_LAYERS = ("parasol.constraints.physics", "parasol.constraints.core", "parasol.constraints.rules")


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            out[".".join((package, *parts))] = path
    return out


def import_graph() -> nx.DiGraph:
    """module -> module it imports (any import statement anywhere in the file)."""
    mods = modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(mods)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph.add_edges_from((name, t) for t in targets if t in mods and t != name)
    return graph


def test_no_import_cycles() -> None:
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == [], cycles


def _rank(module: str, layers: tuple[str, ...]) -> int | None:
    return next((i for i, layer in enumerate(layers) if module == layer or module.startswith(layer + ".")), None)


@pytest.mark.parametrize("layers", [LAYERS, CONSTRAINT_LAYERS])
def test_nothing_lower_imports_anything_higher(layers: tuple[str, ...]) -> None:
    upward = []
    for a, b in import_graph().edges:
        ra, rb = _rank(a, layers), _rank(b, layers)
        if ra is not None and rb is not None and rb > ra:
            upward.append((a, b))
    assert upward == []


def _calls(path: Path, name: str) -> int:
    return sum(1 for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name)


def test_one_cpsat_solver_setup() -> None:
    """Every CP-SAT solver is made by solver/search/cpsat.py (one seed, one worker), so explain's
    diagnoses and solve's search cannot run under different settings."""
    makers = sorted(str(path.relative_to(ROOT)) for path in modules().values() if _calls(path, "CpSolver"))
    assert makers == ["solver/search/cpsat.py"]


def test_rule_set_built_once_per_problem() -> None:
    problem = load_problem(ROOT / "problems" / "deepseek-v4-pro-1024.yaml")
    assert active_constraints(problem) is active_constraints(problem)
    assert active_constraints(load_problem(ROOT / "problems" / "deepseek-v4-pro-1024.yaml")) is not \
        active_constraints(problem)

"""parasol: a CP-SAT planner for the parallel mapping of large-scale LLM training.

The work lives in the sub-packages kept at the top of the repository: ``hardware`` (cluster
topology), ``problems`` (problem language, model catalog, mappings), ``constraints`` (rules and the
physics they need) and ``solver`` (CP-SAT, explain, CLI). Nothing lower imports anything higher.

Python API: ``p = parasol.load("problems/x.yaml")`` (or a dict, or a catalog name with ``hardware=`` and
``gpus=``), ``parasol.solve(p)``, ``parasol.explain(p, tp=8, pp=4)``, ``parasol.sweep(p, [256, 512])``;
each result has ``.to_json()`` with the CLI's ``--json`` content.
"""

from time import perf_counter

STARTED_S = perf_counter()
"""perf_counter() when parasol was first imported: a `parasol` process counts its --time-limit from here
(solver/cli.py run), so the limit bounds the command's whole wall time, imports included."""

__version__ = "0.1.0"

API = ("load", "solve", "explain", "sweep")
"""The Python API (parasol/api.py), imported on first use so that `import parasol` stays light."""
__all__ = [*API, "__version__"]


def __getattr__(name: str) -> object:
    """`parasol.load`, `parasol.solve`, `parasol.explain`, `parasol.sweep` from parasol/api.py."""
    if name in API:
        from parasol import api

        return getattr(api, name)
    raise AttributeError(f"module 'parasol' has no attribute {name!r}")

"""parasol: a CP-SAT planner for the parallel mapping of large-scale LLM training.

The work lives in the sub-packages kept at the top of the repository: ``hardware`` (cluster
topology), ``problems`` (problem language, model catalog, mappings), ``constraints`` (rules and the
physics they need) and ``solver`` (CP-SAT, explain, CLI). Nothing lower imports anything higher.
"""

__version__ = "0.1.0"

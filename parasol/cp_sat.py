"""OR-Tools' CP-SAT module (`cp_model`), imported for all of parasol without pandas where pandas is not loaded yet.

cp_model imports pandas at its top only for its Series helpers (`new_int_var_series` and the like), which parasol
never calls, and importing pandas took 0.17-0.26 s of every command's start: about a fifth of a bundled `solve`
(README, "Speed"). While cp_model loads, a stand-in takes pandas' place, holding the two classes cp_model's
module-level annotations name; once it has loaded, the stand-in leaves `sys.modules` and hands every attribute
asked of it on to the real pandas, imported then: the helpers still work, only a later `import pandas` pays for
it. Where pandas is loaded already, or cp_model is, or OR-Tools comes to read more of pandas as it loads, cp_model
is imported as it is.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

CP_MODEL = "ortools.sat.python.cp_model"


class PandasStandIn(ModuleType):
    """pandas as cp_model sees it: while cp_model loads, placeholder `Index` and `Series` classes (what its
    module-level annotations read); after `release`, each attribute from the real pandas, imported on first use."""

    def __init__(self) -> None:
        super().__init__("pandas")
        self.Index = type("Index", (), {})
        self.Series = type("Series", (), {})

    def release(self) -> None:
        """Drop the placeholders: from now on every attribute comes from the real pandas."""
        del self.Index, self.Series

    def __getattr__(self, name: str) -> object:
        """The real pandas' attribute `name`; none while the stand-in is pandas (cp_model loading: its import then
        falls back to the real pandas) and no module dunder (import machinery probes those)."""
        pandas = None if name.startswith("__") else importlib.import_module("pandas")
        if pandas is None or pandas is self:
            raise AttributeError(f"module 'pandas' has no attribute {name!r} while OR-Tools' cp_model loads")
        return getattr(pandas, name)


def without_pandas() -> ModuleType:
    """cp_model, imported with a PandasStandIn for pandas unless pandas or cp_model is loaded already; as it is
    when it reads more of pandas than the stand-in holds while it loads."""
    if "pandas" in sys.modules or CP_MODEL in sys.modules:
        return importlib.import_module(CP_MODEL)
    stand_in = PandasStandIn()
    sys.modules["pandas"] = stand_in
    try:
        module = importlib.import_module(CP_MODEL)
    except (AttributeError, TypeError):
        module = None
    finally:
        if sys.modules.get("pandas") is stand_in:
            del sys.modules["pandas"]
    if module is None:
        sys.modules.pop(CP_MODEL, None)
        return importlib.import_module(CP_MODEL)
    stand_in.release()
    return module


cp_model = without_pandas()

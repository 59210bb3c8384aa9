"""OR-Tools' cp_model imported without pandas (parasol/cp_sat.py): parasol's commands never load pandas, and
cp_model's pandas helpers still work, loading the real pandas when first used. Each case runs in a fresh
interpreter, since which modules are loaded is what it checks."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    """Run `code` in a fresh interpreter; its standard output."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_commands_never_load_pandas() -> None:
    """The CLI and the Python API import cp_model (through parasol.cp_sat) without pandas, and a solve runs."""
    assert _run("""
        import sys
        import parasol.solver.cli, parasol.api
        from parasol.cp_sat import cp_model
        from parasol.solver.search.cpsat import deterministic_solver
        model = cp_model.CpModel()
        x = model.NewIntVar(0, 10, "x")
        model.Add(x >= 3)
        model.Minimize(x)
        solver = deterministic_solver(1.0)
        print(solver.Solve(model) == cp_model.OPTIMAL, solver.Value(x), "pandas" in sys.modules)
    """) == "True 3 False"


def test_cp_model_pandas_helpers_load_the_real_pandas() -> None:
    """cp_model's Series helpers, never called by parasol, still work: they load the real pandas."""
    assert _run("""
        from parasol.cp_sat import cp_model
        import pandas
        xs = cp_model.CpModel().new_int_var_series(name="x", index=pandas.Index([1, 2]), lower_bounds=0,
                                                   upper_bounds=3)
        print(type(xs).__name__, len(xs), cp_model.pd.Series is pandas.Series)
    """) == "Series 2 True"


def test_pandas_loaded_before_is_cp_models() -> None:
    """Where pandas is loaded already, cp_model is imported as it is, with the real pandas."""
    assert _run("""
        import pandas
        from parasol.cp_sat import cp_model
        print(cp_model.pd is pandas)
    """) == "True"


def test_a_cp_model_that_reads_more_of_pandas_loads_it() -> None:
    """Should OR-Tools come to read more of pandas than the stand-in holds while cp_model loads, cp_model is
    imported with the real pandas instead (simulated: a stand-in without `Series`)."""
    assert _run("""
        import sys
        import parasol.cp_sat as cp_sat
        del sys.modules[cp_sat.CP_MODEL]
        built = cp_sat.PandasStandIn.__init__

        def lacking(self):
            built(self)
            del self.Series

        cp_sat.PandasStandIn.__init__ = lacking
        module = cp_sat.without_pandas()
        import pandas
        print(module.pd is pandas, type(sys.modules["pandas"]).__name__)
    """) == "True module"

"""The committed solutions/ (issue 8 part 4): every bundled problem has one, it matches a fresh solve within
the objective resolution, and its launch flags round-trip through `explain --megatron-args` (issue 8 part 2,
"Must show: round-trip tests pass for all bundled problems"). Regenerate with `python -m parasol.solver.solutions`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from parasol.solver.outputs.emit import launch_script, round_trip
from parasol.solver.outputs.writers import host_order_text
from parasol.solver.solutions import (
    SOLUTIONS_DIR,
    bundled_problems,
    check_problem,
    compare,
    load_bundled,
    mapping_of,
    problem_of,
    stale_solutions,
)

PROBLEMS = bundled_problems()


def committed(path: Path) -> dict:
    """The committed solution.json of a bundled problem."""
    return json.loads((SOLUTIONS_DIR / path.stem / "solution.json").read_text(encoding="utf-8"))


def test_every_bundled_problem_has_a_committed_solution() -> None:
    """Every problems/*.yaml has solutions/<stem>/ with solution.json and front.md, and a launch script and host
    order when it has a mapping; no folder outlives its problem."""
    assert PROBLEMS
    for path in PROBLEMS:
        folder = SOLUTIONS_DIR / path.stem
        assert (folder / "solution.json").is_file() and (folder / "front.md").is_file(), folder
        has_mapping = bool(committed(path)["mappings"])
        assert (folder / "megatron_args.sh").is_file() == has_mapping
        assert (folder / "hosts.txt").is_file() == has_mapping
    assert stale_solutions(PROBLEMS, SOLUTIONS_DIR) == []


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_committed_launch_files_are_the_emitted_ones(path: Path) -> None:
    """megatron_args.sh and hosts.txt are what solver/outputs/emit.py and output.py write for mapping 1 today."""
    data = committed(path)
    if not data["mappings"]:
        pytest.skip("no feasible mapping to launch")
    first = data["mappings"][0]
    problem = problem_of(load_bundled(path), first)
    title = f"{path.stem}, mapping 1 of {len(data['mappings'])} (Pareto rank {first['pareto_rank']})"
    folder = SOLUTIONS_DIR / path.stem
    assert (folder / "megatron_args.sh").read_text(encoding="utf-8") == launch_script(problem, mapping_of(first), title)
    assert (folder / "hosts.txt").read_text(encoding="utf-8") == host_order_text(mapping_of(first), problem)


@pytest.mark.slow
@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_committed_solutions_round_trip(path: Path) -> None:
    """Each committed mapping's emitted flags (under the memory saving solve chose for it), and the committed
    megatron_args.sh itself, read back by `explain PROBLEM --megatron-args` are feasible and give back the
    same mapping."""
    data, problem = committed(path), load_bundled(path)
    for k, entry in enumerate(data["mappings"], start=1):
        trip = round_trip(problem_of(problem, entry), mapping_of(entry))
        assert trip.ok, (k, trip.differences, trip.violations)
    if data["mappings"]:
        script = (SOLUTIONS_DIR / path.stem / "megatron_args.sh").read_text(encoding="utf-8")
        trip = round_trip(problem, mapping_of(data["mappings"][0]), text=script)
        assert trip.ok and not trip.notes, (trip.differences, trip.violations, trip.notes)


@pytest.mark.slow
@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_committed_solutions_match_a_fresh_solve(path: Path) -> None:
    """CI re-solves every bundled problem: same status and mappings, objective values within one resolution
    unit (0.1 ms of step time, 10 MB of peak memory)."""
    drifts = check_problem(path, SOLUTIONS_DIR)
    assert drifts == [], "\n".join(map(str, drifts))


def _solution(step: float, memory: float, status: str = "optimal", tp: int = 1) -> dict:
    """A one-mapping solution dict in the committed shape."""
    mapping = {"gpus": 8, "tp": tp, "pp": 1, "cp": 1, "ep": 1, "etp": tp, "vpp": 1, "mbs": 1, "gbs": 8,
               "seq_len": 4096, "recompute": "none", "layout": [32], "rank_order": "tp-cp-ep-dp-pp"}
    objective = {"front": {"step_time": step, "peak_memory": memory},
                 "resolution": {"step_time": 0.0001, "peak_memory": 0.01}}
    return {"status": status, "mappings": [{"mapping": mapping, "objective": objective}],
            "search": {"time_limit_s": 600.0}}


def test_compare_lists_every_drift() -> None:
    """The check's tolerance is one resolution unit; beyond it every changed value is listed."""
    base = _solution(10.0, 50.0)
    assert compare("p", base, _solution(10.0001, 50.01)) == []
    drifts = [str(d) for d in compare("p", base, _solution(10.5, 49.0, status="feasible", tp=2))]
    assert drifts[0] == "p: status optimal -> feasible"
    assert "not proved within 600.0 s" in drifts[1]
    assert drifts[2] == "p: mapping 1: tp 1 -> 2, etp 1 -> 2"
    assert drifts[3] == "p: mapping 1: step_time 10.0 -> 10.5 (tolerance 0.0001)"
    assert drifts[4] == "p: mapping 1: peak_memory 50.0 -> 49.0 (tolerance 0.01)"
    two = _solution(10.0, 50.0)
    two["mappings"] *= 2
    assert [str(d) for d in compare("p", base, two)] == ["p: 1 -> 2 mappings"]


def test_new_and_removed_problems_are_reported(tmp_path: Path) -> None:
    """A problem file without a solution, and a solution folder without a problem, are drifts."""
    problems, out = tmp_path / "problems", tmp_path / "solutions"
    problems.mkdir()
    shutil.copy(PROBLEMS[0], problems / "new-problem.yaml")
    (out / "gone").mkdir(parents=True)
    (out / "gone" / "solution.json").write_text("{}", encoding="utf-8")
    missing = check_problem(problems / "new-problem.yaml", out)
    assert len(missing) == 1 and "no committed solution" in str(missing[0])
    stale = stale_solutions(bundled_problems(problems), out)
    assert [d.problem for d in stale] == ["gone"]

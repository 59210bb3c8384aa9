"""`parasol sweep` (issue 6): sizes parsing, strong and weak scaling, failing sizes reported and not
lost, the same answers from every backend, the scaling table, the plot, and seed 000's story of
scaling DeepSeek-V4-Pro from 1,024 to 8,192 GPUs at a fixed global batch (seed 000 §扩容;
BRIEF 'Numbers the project must reproduce': m 32 → 4, bubble 17.9% → 63.6%)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from inline_problems import SMALL_MOE

from parasol.errors import InputError
from parasol.problems.schema import MAX_GPUS
from parasol.solver.cli import main
from parasol.solver.sweep.jobs import (
    MAX_SIZES,
    MappingSummary,
    SizeJob,
    SizeResult,
    parse_sizes,
    run_size,
    weak_batch,
)
from parasol.solver.sweep.run import SweepResult, answers, run_sweep, sweep_jobs

SMALL = SMALL_MOE + """search: {tp: 1, pp: [1, 2], cp: 1, ep: [1, 2], etp: 1, vpp: 1, mbs: 1, recompute: none}
mapping: {tp: 1, pp: 2, ep: 2}
"""
"""The inline MoE of the explain tests (64 H100, GBS 256) with a small search space: ~0.2 s a size."""

V4_1024 = "problems/deepseek-v4-pro-1024.yaml"
SLOW_SIZE = 32
CRASH_SIZE = 16


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL, encoding="utf-8")
    return path


def sleepy(job: SizeJob) -> SizeResult:
    """A task whose SLOW_SIZE never answers in time (for the deadline test)."""
    if job.gpus == SLOW_SIZE:
        time.sleep(120)
    return run_size(job)


def crashing(job: SizeJob) -> SizeResult:
    """A task whose worker dies at CRASH_SIZE (for the lost-worker test)."""
    if job.gpus == CRASH_SIZE:
        os._exit(3)
    return run_size(job)


# --- sizes -----------------------------------------------------------------------------------------


def test_sizes_lists_and_ranges() -> None:
    """Issue 6: `--gpus 256,512,…` or a range like `1024..65536x2`; repeats dropped, ascending."""
    assert parse_sizes("1024,2048,4096,8192") == (1024, 2048, 4096, 8192)
    assert parse_sizes("1024..65536x2") == (1024, 2048, 4096, 8192, 16384, 32768, 65536)
    assert parse_sizes("256..65536x2") == tuple(256 << k for k in range(9))
    assert parse_sizes("1024..4096+1024, 512, 2048") == (512, 1024, 2048, 3072, 4096)
    assert parse_sizes("8..100x4") == (8, 32)
    assert parse_sizes("1_024") == (1024,)


@pytest.mark.parametrize("text", ["", "abc", "1024,,2048", "0", "4096..1024x2", "8..64x1", "8..64+0",
                                  "1..100000+1", f"{MAX_GPUS * 2}", "1024..2048x"])
def test_sizes_errors_are_input_errors(text: str) -> None:
    """Bad --gpus values are one InputError naming --gpus and the accepted grammar (never a traceback)."""
    with pytest.raises(InputError) as err:
        parse_sizes(text)
    assert err.value.field == "--gpus"
    assert "A..BxF" in str(err.value)


def test_too_many_sizes_is_refused() -> None:
    """A range with a small step is capped at MAX_SIZES sizes."""
    with pytest.raises(InputError, match=f"more than {MAX_SIZES} sizes"):
        parse_sizes(f"8..{8 * (MAX_SIZES + 1)}+8")


# --- strong and weak scaling ------------------------------------------------------------------------


def test_strong_keeps_and_weak_scales_the_global_batch(small: Path) -> None:
    """Strong scaling keeps the problem's GBS (seed 000: B = 4,096 at 1,024 and 8,192 GPUs); weak
    scaling keeps its sequences per GPU (256 sequences on 64 GPUs: 32 on 8, 1,024 on 256)."""
    _, strong, rejected = sweep_jobs(small, (8, 64, 256), weak=False, top=1, time_limit_s=10)
    assert [j.global_batch for j in strong] == [256, 256, 256] and not rejected
    _, weak, rejected = sweep_jobs(small, (8, 64, 256), weak=True, top=1, time_limit_s=10)
    assert [j.global_batch for j in weak] == [32, 256, 1024] and not rejected
    assert weak_batch(4096, 1024, 8192) == 32768


def test_weak_batch_that_is_not_whole_is_an_error_for_that_size(tmp_path: Path) -> None:
    """Weak scaling at a size where GBS·N/N_file is fractional (100 sequences on 64 GPUs: 12.5 on 8)
    reports that size as `error` and keeps the others."""
    path = tmp_path / "gbs100.yaml"
    path.write_text(SMALL.replace("global_batch: 256", "global_batch: 100"), encoding="utf-8")
    _, jobs, rejected = sweep_jobs(path, (8, 16), weak=True, top=1, time_limit_s=10)
    assert [(j.gpus, j.global_batch) for j in jobs] == [(16, 25)]
    assert [(r.gpus, r.status) for r in rejected] == [(8, "error")]
    assert "12.5" in rejected[0].reason and "not a whole number" in rejected[0].reason


def test_size_not_a_whole_number_of_nodes_is_solved_on_partial_nodes(small: Path) -> None:
    """A size that is not a whole number of 8-GPU nodes (12, GBS 48) is solved with 6 ranks on each of 2 nodes
    (hardware/topology.py for_job), not refused."""
    job = SizeJob(SMALL, str(small), str(small.parent), 12, 48, 1, 10.0)
    result = run_size(job)
    assert result.status != "error" and result.mappings, result.reason


# --- the table ---------------------------------------------------------------------------------------


def _summary(step: float, per_gpu: float) -> MappingSummary:
    mapping = {"tp": 1, "pp": 8, "cp": 1, "ep": 64, "etp": 1, "vpp": 1, "mbs": 1, "recompute": "full"}
    return MappingSummary(label="TP1 PP8", mapping=mapping, feasible=True, violations=(), step_time_s=step,
                          tokens_per_s=per_gpu, tokens_per_s_per_gpu=per_gpu, mfu=0.2, num_microbatches=4,
                          bubble_fraction=0.5, dp_attn=8, dp_expert=1, peak_memory_gb=60.0, usable_hbm_gb=74.0)


def test_scaling_efficiency_is_against_the_smallest_size_with_a_mapping() -> None:
    """Issue 6 table: scaling efficiency against the smallest size (here the first with a mapping),
    marginal efficiency against the previous one; a size without a mapping keeps its row and status."""
    sizes = (SizeResult(256, 4096, "infeasible", "no rows"),
             SizeResult(512, 4096, "optimal", best=_summary(10.0, 800.0)),
             SizeResult(1024, 4096, "optimal", best=_summary(6.0, 600.0)),
             SizeResult(2048, 4096, "optimal", best=_summary(4.0, 300.0)))
    sweep = SweepResult("p.yaml", "m", "g", False, sizes, "serial", 1, 0.0, 60.0)
    rows = sweep.rows()
    assert [r["gpus"] for r in rows] == [256, 512, 1024, 2048]
    assert "scaling_efficiency" not in rows[0] and rows[0]["status"] == "infeasible"
    assert [r["scaling_efficiency"] for r in rows[1:]] == [1.0, 0.75, 0.375]
    assert [r["marginal_efficiency"] for r in rows[1:]] == [None, 0.75, 0.5]
    notes = sweep.notes()
    assert any("2,048 GPUs: 38% efficiency" in n for n in notes)
    assert any(n.startswith("256 GPUs: infeasible") for n in notes)


# --- running sizes -------------------------------------------------------------------------------------


def test_serial_sweep_reports_every_size(small: Path) -> None:
    """BRIEF contract: `sweep --json` is {"sizes": [{"gpus", "status", "mappings"}]}; a size with no
    mapping (12 GPUs on partial nodes: GBS 256 does not fold onto them) is in the list with its reason,
    the others are solved, in GPU order."""
    data = run_sweep(small, (64, 12, 8), backend="serial").as_dict()
    assert [s["gpus"] for s in data["sizes"]] == [8, 12, 64]
    assert [s["status"] for s in data["sizes"]] == ["optimal", "infeasible", "optimal"]
    assert "12 GPUs" in data["sizes"][1]["reason"]
    for s in (data["sizes"][0], data["sizes"][2]):
        assert s["mappings"] and all(m["feasible"] and m["pareto_rank"] == 1 for m in s["mappings"])
        assert s["best"]["step_time_s"] == min(m["metrics"]["step_time_s"] for m in s["mappings"])
        assert s["reference"]["mapping"]["label"].startswith("TP1 PP2 CP1 EP2")
    assert data["table"][0]["scaling_efficiency"] == 1.0
    json.dumps(data)


@pytest.mark.slow
def test_local_pool_gives_the_serial_answers(small: Path) -> None:
    """Issue 6: results are identical whatever the backend (timings aside)."""
    serial = run_sweep(small, (8, 16, 32, 64), backend="serial").as_dict()
    local = run_sweep(small, (8, 16, 32, 64), backend="local", workers=2).as_dict()
    assert local["run"]["workers"] == 2
    assert answers(local) == answers(serial)


@pytest.mark.slow
def test_a_size_past_its_deadline_is_stopped_and_the_rest_finish(small: Path) -> None:
    """Issue 6: a size that outlives its budget comes back as `timeout` and never blocks the others."""
    start = time.monotonic()
    data = run_sweep(small, (8, SLOW_SIZE, 64), backend="local", workers=2, deadline_s=8.0, task=sleepy).as_dict()
    assert time.monotonic() - start < 60
    status = {s["gpus"]: s["status"] for s in data["sizes"]}
    assert status == {8: "optimal", SLOW_SIZE: "timeout", 64: "optimal"}
    assert "stopped" in data["sizes"][1]["reason"]


@pytest.mark.slow
def test_a_lost_worker_fails_only_its_size(small: Path) -> None:
    """Issue 6: a size whose worker dies is reported as `failed`, not lost; the other sizes finish."""
    data = run_sweep(small, (8, CRASH_SIZE, 32, 64), backend="local", workers=2, task=crashing).as_dict()
    status = {s["gpus"]: s["status"] for s in data["sizes"]}
    assert status == {8: "optimal", CRASH_SIZE: "failed", 32: "optimal", 64: "optimal"}
    assert "worker" in data["sizes"][1]["reason"]


@pytest.mark.slow
def test_ray_backend_gives_the_serial_answers(small: Path) -> None:
    """Issue 6: each size as a Ray task on a local Ray instance (2 CPUs), the same answers as serial."""
    ray = pytest.importorskip("ray")
    serial = run_sweep(small, (8, 12, 16, 64), backend="serial").as_dict()
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        remote = run_sweep(small, (8, 12, 16, 64), backend="ray").as_dict()
    finally:
        ray.shutdown()
    assert remote["run"]["backend"] == "ray" and remote["run"]["workers"] == 2
    assert answers(remote) == answers(serial)


# --- seed 000 -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_seed_000_story_from_1024_to_8192_gpus() -> None:
    """Seed 000 §扩容 (BRIEF: A m 32, bubble 17.9%; B m 4, bubble 63.6%): the problem's mapping (A at
    1,024 GPUs is B at 8,192) shows m falling and the bubble rising; the best mapping's m falls too,
    and at 8,192 it beats B both as modelled (B does not fit in memory) and B's nearest feasible repair."""
    sweep = run_sweep(V4_1024, (1024, 8192), backend="serial")
    a, b = sweep.sizes
    assert (a.reference.mapping.num_microbatches, b.reference.mapping.num_microbatches) == (32, 4)
    assert (a.reference.mapping.bubble_fraction, b.reference.mapping.bubble_fraction) == (0.179487, 0.636364)
    assert not b.reference.mapping.feasible and "memory-fits-hbm" in b.reference.mapping.violations
    assert a.best.num_microbatches > b.best.num_microbatches
    assert a.best.bubble_fraction < b.best.bubble_fraction
    assert b.best.step_time_s < b.reference.mapping.step_time_s < b.reference.nearest.step_time_s
    assert b.reference.nearest.feasible and b.reference.repair
    assert any(n.startswith("8,192 GPUs: best") and "less step time" in n for n in sweep.notes())


# --- command line and plot -------------------------------------------------------------------------------


def test_cli_bad_sizes_exit_2_without_traceback(small: Path) -> None:
    """Bad input is one paragraph on stderr and exit code 2 (README: bad input never shows a traceback)."""
    result = CliRunner().invoke(main, ["sweep", str(small), "--gpus", "8..4x2"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--gpus" in result.output


def test_cli_json(small: Path) -> None:
    """`parasol sweep --json`: the BRIEF's {"sizes": [{"gpus", "status", "mappings"}]} on stdout only."""
    result = CliRunner().invoke(main, ["sweep", str(small), "--gpus", "8,12", "--backend", "serial", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [(s["gpus"], s["status"], bool(s["mappings"])) for s in data["sizes"]] == [(8, "optimal", True),
                                                                                       (12, "infeasible", False)]
    assert data["scaling"] == "strong" and data["table"][0]["step_time_s"] > 0


@pytest.mark.slow
def test_cli_plot_writes_a_png(small: Path, tmp_path: Path) -> None:
    """`parasol sweep --plot FILE.png` draws the scaling figure (matplotlib, Agg) and says where."""
    plot = tmp_path / "scaling.png"
    result = CliRunner().invoke(main, ["sweep", str(small), "--gpus", "8,64", "--backend", "serial",
                                       "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "best mapping" in result.stdout and "plot written" in result.output


def test_plot_refuses_other_formats(tmp_path: Path) -> None:
    """--plot writes PNG only; another suffix is an InputError with the fix."""
    from parasol.solver.outputs.plots import scaling_plot

    with pytest.raises(InputError, match="PNG"):
        scaling_plot({"table": [], "sizes": []}, tmp_path / "scaling.svg")


def test_unknown_backend_is_refused_before_any_work(small: Path) -> None:
    """An unknown backend is an InputError naming --backend and the choices."""
    with pytest.raises(InputError, match="local, ray, serial"):
        run_sweep(small, (8,), backend="gpu")

"""`explain` on infeasible mappings: the violated rules with their slack, a minimal conflicting set,
and nearest repairs that the Python evaluator confirms.

Sources: seed 000 §PP 和 microbatch (B = 8,192 GPUs TP1 PP8 CP1 EP64, m = 4; the interleaved VPP
schedule needs PP <= microbatch group <= m, so B with VPP is rejected: 8 > 4);
reference/megatron-cases.yaml C02 (B with VPP2: vpp-microbatch-group-range), C03 (group
size 4 < PP 8) and C05 (10 % 4 = 2: vpp-final-group-remainder); megatron-rules.yaml for the ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from inline_problems import SMALL_MOE

from parasol.constraints.evaluate import evaluate
from parasol.problems.loader import Problem, load_problem_text
from parasol.problems.mapping import Mapping
from parasol.solver.cli import main
from parasol.solver.diagnose.compile import compile_rules, fixed_domains
from parasol.solver.diagnose.conflicts import infeasible_under, judged_error_rules, minimal_conflict
from parasol.solver.diagnose.explain import explain
from parasol.solver.diagnose.repairs import nearest_repairs

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"
SEED_8192 = PROBLEMS / "deepseek-v4-pro-8192.yaml"



def seed_b_roomy() -> Problem:
    """Seed 000's 8,192-GPU problem with 141 GB of HBM per GPU and full recompute (uniform, 1 layer per
    checkpoint, as Megatron requires), so that B with VPP2 breaks only the interleaved-schedule rules,
    not memory (on 80 GB H800s it breaks memory too)."""
    text = SEED_8192.read_text()
    text = text.replace("  preset: h800-hgx", "  preset: h800-hgx\n  gpu: {hbm_gb: 141}", 1)
    text = text.replace("  recompute: none", "  recompute: full", 1)
    text = text.replace("  options:", "  options:\n    recompute_method: uniform\n    recompute_num_layers: 1", 1)
    return load_problem_text(text, source=str(SEED_8192), base_dir=PROBLEMS)


def seed_b(**kw) -> Mapping:
    """Seed 000's configuration B: 8,192 GPUs, TP1 PP8 CP1 EP64 ETP1, MBS 1, GBS 4096, S 8192."""
    base = dict(gpus=8192, tp=1, pp=8, cp=1, ep=64, etp=1, mbs=1, gbs=4096, seq_len=8192, recompute="full")
    return Mapping(**{**base, **kw})


@pytest.fixture(scope="module")
def roomy() -> Problem:
    return seed_b_roomy()


@pytest.fixture(scope="module")
def small_moe() -> Problem:
    return load_problem_text(SMALL_MOE, source="small-moe-inline.yaml")


@pytest.fixture(scope="module")
def b_vpp2(roomy: Problem):
    return explain(roomy, seed_b(vpp=2))


def test_seed_b_with_vpp2_breaks_the_microbatch_group_range_by_4(b_vpp2) -> None:
    """Seed 000: B has m = 4 and the default group N = PP = 8, so PP <= N <= m fails by 4 microbatches.
    The remainder rule also fails (4 % 8 = 4, neither 0 nor >= 8); nothing else does."""
    assert not b_vpp2.feasible
    violated = {v.rule: v for v in b_vpp2.evaluation.violations}
    assert set(violated) <= {"vpp-microbatch-group-range", "vpp-final-group-remainder"}
    rng = violated["vpp-microbatch-group-range"]
    assert rng.slack == -4
    assert rng.unit == "microbatches"
    assert "PP 8 > 4 microbatches" in rng.message
    assert "schedules.py:1157" in rng.citation.source


def test_seed_b_with_vpp2_has_a_minimal_conflict_and_confirmed_repairs(roomy: Problem, b_vpp2) -> None:
    """Seed 000 / megatron-cases C02-C03: the fix is more microbatches (GBS 8192 gives m = 8) or no VPP;
    every repair re-checks feasible in the Python evaluator and changes few fields; among as many changes
    the ones keeping GBS come first, fastest modelled step first."""
    assert b_vpp2.conflict == ("vpp-microbatch-group-range",)
    assert len(b_vpp2.repairs) >= 2
    texts = [r.text for r in b_vpp2.repairs]
    assert "drop VPP (vpp 2 → 1)" in texts
    more = [r.text for r in explain(roomy, seed_b(vpp=2), repairs=8).repairs]
    assert "raise GBS to 8192" in more and more.index("raise GBS to 8192") > more.index("drop VPP (vpp 2 → 1)")
    kept = [r.step_time_s for r in b_vpp2.repairs if "gbs" not in r.changes and len(r.changes) == 1]
    assert kept == sorted(kept)
    for repair in b_vpp2.repairs:
        assert evaluate(roomy, repair.mapping).feasible
        assert 1 <= len(repair.changes) <= 2
        assert repair.mapping.gpus == 8192 and repair.mapping.seq_len == 8192
    sizes = [len(r.changes) for r in b_vpp2.repairs]
    assert sizes == sorted(sizes)


def test_explain_json_carries_conflict_and_repairs(b_vpp2) -> None:
    """BRIEF `explain --json`: `repairs` are mappings (the --set keys, layout as a list) with changes."""
    data = json.loads(json.dumps(b_vpp2.as_dict()))
    assert data["minimal_conflict"] == ["vpp-microbatch-group-range"]
    first = data["repairs"][0]
    assert set(first["mapping"]) >= {"gpus", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "seq_len",
                                     "recompute", "layout"}
    assert sum(first["mapping"]["layout"]) == 61
    assert all(len(pair) == 2 for pair in first["changes"].values())
    assert first["text"]


def test_five_broken_rules_are_all_reported(small_moe: Problem) -> None:
    """megatron-rules.yaml: EP 6 does not divide 16 experts nor fit the 64-GPU expert grid (6·2·1 = 12),
    GBS 100 is not a multiple of MBS·D_a = 32 (eval and training checks), and a 3-stage layout cannot
    serve PP2·VPP2 = 4 virtual stages: five rules, all reported with negative slack."""
    mapping = Mapping(gpus=64, tp=1, pp=2, cp=1, ep=6, etp=1, vpp=2, mbs=1, gbs=100, seq_len=4096,
                      layout=(5, 5, 2))
    ex = explain(small_moe, mapping)
    expected = {"experts-divisible-by-ep", "world-divisible-by-expert-grid", "eval-gbs-divisible",
                "gbs-divisible-by-mbs-dp", "layout-covers-blocks"}
    reported = {v["rule"]: v for v in ex.as_dict()["violations"]}
    assert expected <= set(reported)
    assert all(reported[r]["slack"] < 0 and reported[r]["message"] for r in expected)
    assert ex.conflict and set(ex.conflict) <= set(reported)


@pytest.mark.parametrize("sets", [
    {"vpp": 2},
    {"ep": 6, "gbs": 100},
    {"tp": 3, "ep": 5, "vpp": 2},
    {"recompute": "none"},
], ids=["vpp2", "ep6-gbs100", "tp3-ep5-vpp2", "no-recompute"])
def test_minimal_conflict_is_minimal(roomy: Problem, sets: dict) -> None:
    """Issue 3: the conflict is infeasible, and dropping any one member makes the pinned model feasible."""
    mapping = seed_b(**sets)
    conflict = minimal_conflict(roomy, mapping)
    assert conflict
    rules = judged_error_rules(roomy, mapping)
    compiled = compile_rules(roomy, rules, fixed_domains(mapping), fixed=mapping)
    assert infeasible_under(compiled, list(conflict))
    for member in conflict:
        assert not infeasible_under(compiled, [r for r in conflict if r != member])
    assert set(conflict) <= {v.rule for v in evaluate(roomy, mapping).violations}


def test_a_feasible_mapping_has_no_conflict_and_no_repairs(roomy: Problem) -> None:
    """Seed 000: B without VPP passes on the roomy cluster; explain adds neither conflict nor repairs."""
    ex = explain(roomy, seed_b())
    assert ex.feasible
    assert ex.conflict == () and ex.repairs == ()
    assert minimal_conflict(roomy, seed_b()) == ()
    assert nearest_repairs(roomy, seed_b()) == []


def test_repairs_are_deterministic(roomy: Problem) -> None:
    """The same mapping gives the same repairs in the same order (one CP-SAT worker, fixed seed)."""
    first = [r.as_dict() for r in nearest_repairs(roomy, seed_b(vpp=2))]
    assert first == [r.as_dict() for r in nearest_repairs(roomy, seed_b(vpp=2))]


def test_cli_explain_prints_conflict_and_repairs_and_exits_1() -> None:
    """BRIEF CLI: `parasol explain … --set vpp=2 --json` exits 1 (infeasible) with repairs and the conflict;
    the table output names the minimal conflicting set and the repairs table."""
    runner = CliRunner()
    args = ["explain", str(SEED_8192), "--set", "vpp=2"]
    result = runner.invoke(main, [*args, "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    violated = {v["rule"] for v in data["violations"]}
    assert {"vpp-microbatch-group-range", "memory-fits-hbm"} <= violated
    assert data["minimal_conflict"] and set(data["minimal_conflict"]) <= violated
    assert data["repairs"] and all(r["changes"] for r in data["repairs"])
    table = runner.invoke(main, [*args, "--full"])
    assert table.exit_code == 1
    assert "Minimal conflicting set" in table.output
    assert "Best feasible repairs" in table.output
    short = runner.invoke(main, args)
    assert "Minimal conflict:" in short.output and "Best repairs" in short.output


QWEN3_235B_512 = """
name: qwen3-235b-pp32
model: qwen3-235b-a22b
training: {seq_len: 4096, global_batch: 1024, precision: bf16}
hardware: {preset: h100-hgx, gpus: 512}
framework:
  options: {account_for_embedding_in_pipeline_split: %s, account_for_loss_in_pipeline_split: %s}
"""


def test_pp_times_vpp_may_reach_blocks_plus_embedding_and_loss_slots() -> None:
    """PP32 × VPP3 = 96 virtual stages = 94 blocks + embedding + loss: Megatron builds >= 0 layers in
    the first and last virtual stage (transformer_block.py:187-200), so the mapping is judged; without the
    slots two virtual stages would hold nothing (rule virtual-stages-within-blocks, 94 - 96 = -2)."""
    from parasol.problems.mapping_input import build_mapping
    sets = {"pp": "32", "vpp": "3", "ep": "16"}
    accounted = load_problem_text(QWEN3_235B_512 % ("true", "true"), source="q.yaml")
    mapping = build_mapping(accounted, sets)
    result = evaluate(accounted, mapping)
    assert result.ledger is not None and not result.skipped
    assert result.facts.derived.layout[0] == 0 and result.facts.derived.layout[-1] == 0
    plain = load_problem_text(QWEN3_235B_512 % ("false", "false"), source="q.yaml")
    broken = {v.rule: v.slack for v in evaluate(plain, build_mapping(plain, sets)).violations}
    assert broken["virtual-stages-within-blocks"] == -2


def test_set_changes_training_settings_and_options_and_names_a_bad_value() -> None:
    """--set fsdp=… / overlap_grad_reduce=… reach the problem; a value the field refuses names the key."""
    from parasol.errors import InputError
    from parasol.problems.mapping_input import apply_settings, parse_sets, split_sets
    problem = load_problem_text(SMALL_MOE, source="small-moe-inline.yaml")
    mapping, settings = split_sets(parse_sets(("tp=2", "fsdp=torch-fsdp2", "overlap_grad_reduce=false")))
    assert mapping == {"tp": "2"}
    updated = apply_settings(problem, settings)
    assert updated.training.fsdp == "torch-fsdp2" and updated.spec.framework.options.overlap_grad_reduce is False
    with pytest.raises(InputError, match="fsdp"):
        apply_settings(problem, {"fsdp": "zero9"})


def test_no_cut_search_where_no_cut_can_mend_the_degrees(monkeypatch: pytest.MonkeyPatch) -> None:
    """repairs.best_cut skips the cut search when the degrees break a rule no cut reads (cut_may_mend): a dense
    model at EP 2 breaks ep-requires-experts whatever its cut (on Nemotron-H 8B at PP16 VPP3 each such search
    took half a minute of explain's two); at TP4 PP4 the even cut overflows memory, which a cut decides, and the
    search runs."""
    from parasol.problems.loader import load_problem
    from parasol.solver.diagnose import repairs
    from parasol.solver.search.space import Row

    problem = load_problem("problems/llama-3.1-70b-h100-256.yaml")
    options = problem.spec.framework.options
    searched: list[Row] = []
    monkeypatch.setattr(repairs, "fastest_cut", lambda c, *rest: searched.append(c.row) or (None, True))
    base = dict(gpus=256, gbs=512, seq_len=8192, tp=8, pp=4, recompute="full")
    assert repairs.best_cut(problem, Mapping(**base, ep=2), options) == repairs.BestCut(None)
    assert not repairs.cut_may_mend(problem, Mapping(**base, ep=2), options) and searched == []
    tight = Mapping(**{**base, "tp": 4, "pp": 4, "recompute": "none"})
    assert repairs.cut_may_mend(problem, tight, options)
    repairs.best_cut(problem, tight, options)
    assert len(searched) == 1


def test_a_repair_cut_not_proved_fastest_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A repair's cut whose search ran out of its work (cuts.fastest_cut unproved) is offered as a cut that fits,
    never as the fastest (repairs.recut); a proved one is the fastest cut that fits."""
    from parasol.problems.loader import load_problem
    from parasol.solver.diagnose import repairs

    problem = load_problem("problems/llama-3.1-70b-h100-256.yaml")
    options = problem.spec.framework.options
    tight = Mapping(gpus=256, gbs=512, seq_len=8192, tp=4, pp=4, recompute="none")
    base = repairs.build_repair(problem, tight, repairs.current_values(tight))
    proved = repairs.recut(problem, tight, base, options)
    assert proved is not None and "(fastest cut that fits)" in proved.text
    found = repairs.fastest_cut
    monkeypatch.setattr(repairs, "fastest_cut", lambda *args: (found(*args)[0], False))
    unproved = repairs.recut(problem, tight, base, options)
    assert unproved is not None and unproved.layout == proved.layout
    assert "a cut that fits; its search stopped before proving it fastest" in unproved.text
    assert "fastest cut that fits" not in unproved.text


DENSE_70B_ON_64 = """model: llama-3.1-70b
training:
  seq_len: 2048
  global_batch: 2048
hardware:
  preset: h100-hgx
  gpus: 64
"""
"""A new user's dense problem (catalog model and preset, no search section) for launch lines that give EP."""

DENSE_EP16 = Mapping(gpus=64, gbs=2048, seq_len=2048, tp=8, pp=4, cp=2, ep=16, etp=8, vpp=4, mbs=4, recompute="none")
"""Llama 3.1 70B at EP 16, which a dense model refuses (ep-requires-experts, world-divisible-by-expert-grid)."""


def test_a_dense_model_given_ep_is_repaired_by_dropping_it() -> None:
    """EP 16 on a dense model has one repair, EP 1, outside a factor 4 of 16: every degree's neighbourhood holds 1
    (repairs.neighbourhood), so explain offers it instead of "no repair found" (found by fuzzing launch lines as a
    new user: 15 s for no repair, now about a second)."""
    from parasol.solver.diagnose.repairs import neighbourhood

    problem = load_problem_text(DENSE_70B_ON_64, source="dense-70b-inline.yaml")
    assert all(1 in values for values in neighbourhood(problem, DENSE_EP16).values())
    found = nearest_repairs(problem, DENSE_EP16)
    assert found and found[0].changes == {"ep": (16, 1)}
    assert evaluate(problem, found[0].mapping).feasible


def test_a_repair_cut_is_offered_only_when_it_is_faster_as_printed() -> None:
    """repairs.recut offers a cut beside a feasible repair only when the cut's modelled step time, as explain
    prints it, is below the repair's own split: the cut search ranks cuts by its linear tables, and on Llama 3.1
    70B at EP 1 its fastest cut (5×11 4 5 6 5×2) prints 57.395 s against the even split's 57.342 s."""
    from parasol.solver.diagnose import repairs

    problem = load_problem_text(DENSE_70B_ON_64, source="dense-70b-inline.yaml")
    options = problem.spec.framework.options
    for repair in repairs.nearest_repairs(problem, DENSE_EP16, k=6):
        if "layout" not in repair.changes:
            continue
        own = repair.mapping.model_copy(update={"layout": None})
        if evaluate(problem, own, options=options).feasible:
            assert repair.step_time_s < repairs.modelled_step_s(problem, own, evaluate(problem, own, options=options))
    fixed = repairs.build_repair(problem, DENSE_EP16, {**repairs.current_values(DENSE_EP16), "ep": 1})
    cut = repairs.best_cut(problem, fixed.mapping, options).layout
    assert cut is not None and cut != fixed.layout
    recut = fixed.mapping.model_copy(update={"layout": cut})
    slower = repairs.modelled_step_s(problem, recut, evaluate(problem, recut, options=options))
    assert slower >= repairs.modelled_step_s(problem, fixed.mapping, evaluate(problem, fixed.mapping, options=options))
    assert repairs.recut(problem, DENSE_EP16, fixed, options) is None


def test_a_round_asks_its_memory_table_only_the_tuples_of_its_changes() -> None:
    """repairs._Round.reach names exactly the degree tuples of the product of the neighbourhood with the round's
    number of changes (the recompute change counted), in the product's order: the table the round posts is the
    one the whole product gave, without walking it."""
    from itertools import product

    from parasol.constraints.core.base import Severity
    from parasol.constraints.rules.registry import active_constraints
    from parasol.problems.mapping import DEGREES
    from parasol.solver.diagnose.repairs import _Round, current_values, neighbourhood

    problem = load_problem_text(DENSE_70B_ON_64, source="dense-70b-inline.yaml")
    rules = tuple(r for r in active_constraints(problem) if r.severity is Severity.error)
    domains = [neighbourhood(problem, DENSE_EP16)[n] for n in DEGREES]
    cur = current_values(DENSE_EP16)
    for budget in (1, 2):
        round_ = _Round(problem, DENSE_EP16, rules, problem.spec.framework.options, DENSE_EP16.gbs, budget)
        for recompute in ("none", "full"):
            whole = [t for t in product(*domains)
                     if sum(x != cur[n] for x, n in zip(t, DEGREES, strict=True)) + (recompute != "none") == budget]
            assert round_.reach(domains, recompute) == whole


def test_repairs_of_a_mapping_without_a_ledger_read_the_gpus_usable_memory(tmp_path: Path) -> None:
    """The repairs' header gives the GPU's usable HBM even when the mapping's own grid does not divide the world
    (no ledger of its own: GPT-3 5B at TP4 PP16 CP4 on 128 B200 printed "usable 0.0 GB")."""
    path = tmp_path / "gpt-3-5b.yaml"
    path.write_text("model: gpt-3-5b\ntraining:\n  seq_len: 2048\n  global_batch: 256\nhardware:\n"
                    "  preset: b200-hgx\n  gpus: 128\n")
    usable = load_problem_text(path.read_text(), source=str(path)).hardware.gpu.usable_hbm_gb
    result = CliRunner().invoke(main, ["explain", str(path), *sum((["--set", f"{k}={v}"] for k, v in dict(
        tp=4, pp=16, cp=4, ep=16, etp=4, vpp=4, mbs=2, recompute="none").items()), [])])
    assert result.exit_code == 1, result.output
    assert f"usable {usable:.1f} GB)" in result.output and usable > 100


def test_cut_searches_run_only_for_repairs_that_could_be_shown(roomy: Problem, monkeypatch: pytest.MonkeyPatch) -> None:
    """nearest_repairs searches a repair's cut only while the cut, one change more, could still rank among the k
    shown (repairs._may_rank): seed 000's B at VPP 2 has three one-change repairs, so of its eight cut searches
    only the mapping's own cut (one change) can show a repair and runs; the answer is the one every search gives."""
    from parasol.solver.diagnose import repairs

    searched: list[Mapping] = []
    recut = repairs.recut
    monkeypatch.setattr(repairs, "recut", lambda problem, original, repair, options: searched.append(
        repair.mapping) or recut(problem, original, repair, options))
    gated = [r.as_dict() for r in nearest_repairs(roomy, seed_b(vpp=2))]
    asked = len(searched)
    monkeypatch.setattr(repairs, "_may_rank", lambda *args: True)
    every = [r.as_dict() for r in nearest_repairs(roomy, seed_b(vpp=2))]
    assert gated == every
    assert asked < len(searched) - asked

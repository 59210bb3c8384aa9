"""Issue 15: the default search space is what a Megatron engineer tunes (VPP to 16, MBS to 4 or 8, TP over
two NVLink domains, ETP for MoE), and the MoE token dispatcher and the CP communication type are per-row
choices `solve` settles by pricing (solver/search/choices.py), shows and emits."""

from __future__ import annotations

import pytest
from inline_problems import SMALL_MOE

from parasol.constraints.physics.comm import group_link
from parasol.constraints.physics.exchanges import cp_a2a_bytes, cp_comm
from parasol.constraints.physics.pricing import cp_unhidden_seconds
from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.errors import InputError
from parasol.problems.loader import load_problem, load_problem_text
from parasol.problems.mapping import Mapping
from parasol.problems.model.architecture import GQAAttention
from parasol.solver.diagnose.explain import explain
from parasol.solver.outputs.emit import megatron_args
from parasol.solver.search.choices import settled
from parasol.solver.search.solve import solve
from parasol.solver.search.space import (
    DEFAULT_VPP,
    Row,
    choice_variants,
    cp_comm_choices,
    default_domains,
    dispatcher_choices,
    expert_tp_choices,
    with_choices,
)

DENSE = """
model: llama-3.1-70b
training: {seq_len: 2048, global_batch: 1024}
hardware: {preset: h100-hgx, gpus: 256}
"""


def test_default_domains_reach_what_engineers_tune() -> None:
    """VPP 1-4, 6, 8, 12, 16 (as many as two ranks of blocks hold); MBS to 8 for 2k sequences, to 4 for
    longer; TP 16 over two 8-GPU NVLink domains while tp_across_nvlink is a warning, not as an error."""
    dense = load_problem_text(DENSE)
    domains = default_domains(dense)
    assert domains["vpp"] == DEFAULT_VPP == (1, 2, 3, 4, 6, 8, 12, 16)
    assert domains["mbs"] == (1, 2, 4, 8)
    assert domains["tp"] == (1, 2, 4, 8, 16)
    assert default_domains(load_problem_text(DENSE.replace("2048", "8192", 1)))["mbs"] == (1, 2, 4)
    strict = load_problem_text(DENSE + "framework: {tp_across_nvlink: error}\n")
    assert default_domains(strict)["tp"] == (1, 2, 4, 8)
    assert expert_tp_choices(dense, 16, domains["etp"]) == (16,)
    moe = load_problem_text(SMALL_MOE)
    assert expert_tp_choices(moe, 4, default_domains(moe)["etp"]) == (1, 4)


def test_tp_overlap_hides_collectives_only_inside_an_nvlink_domain() -> None:
    """--tp-comm-overlap's userbuffers map TP peers' buffers over NVLink (TransformerEngine@d0067d0
    userbuffers-host.cpp register_user_buffer_collective): TP 8 on 8-GPU H100 nodes hides its collectives
    behind the GEMMs and launches with the flag; TP 16 over two nodes runs them exposed (most of a third of
    the step for Llama 3.1 70B at MBS 4) and its launch line leaves the flag out."""
    problem = load_problem_text(DENSE)
    steps = {}
    for tp in (8, 16):
        mapping = Mapping(gpus=256, gbs=1024, seq_len=2048, tp=tp, pp=2, cp=1, mbs=4)
        steps[tp] = explain(problem, mapping).step
        flags = dict(megatron_args(problem, mapping).pairs())
        assert ("--tp-comm-overlap" in flags) == (tp == 8)
    assert steps[8].breakdown["tp"] == 0.0
    assert steps[16].breakdown["tp"] > 0.3 * steps[16].step_time_s


def test_default_context_parallel_widens_for_long_contexts() -> None:
    """CP 1-8 with 1,024 tokens per rank; past 8 only while a rank keeps 8,192 tokens: CP 16 at 131,072
    tokens, Llama 3's long-context stage (arXiv:2407.21783, Table 4: TP8 CP16 PP16 on 16,384 H100)."""
    def cp(seq: int) -> tuple[int, ...]:
        return default_domains(load_problem_text(DENSE.replace("2048", str(seq), 1)))["cp"]

    assert cp(2048) == (1, 2) and cp(8192) == cp(65536) == (1, 2, 4, 8)
    assert cp(131072) == (1, 2, 4, 8, 16) and cp(1048576) == (1, 2, 4, 8, 16, 32, 64, 128)


def test_default_pipeline_degrees_take_a_gpu_counts_odd_factors() -> None:
    """PP is every divisor of the GPU count up to the block count: 6,144 GPUs (NVIDIA's Nemotron-4 340B run,
    TP8 PP12, arXiv:2406.11704 §3.1) reach PP 12, and a global batch without the factor 3 of 384 GPUs still
    folds, through PP 3 or 6 with uneven cuts, which Megatron accepts (decoder-first/last-pipeline-num-layers)."""
    assert default_domains(load_problem_text(DENSE.replace("256", "6144")))["pp"] == (
        1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    assert default_domains(load_problem_text(DENSE))["pp"] == (1, 2, 4, 8, 16, 32, 64)
    odd = load_problem_text(DENSE.replace("256", "384").replace("1024", "1000"))
    result = solve(odd, CalibratedStageTimes(odd), top=3, time_limit_s=120)
    assert result.status == "optimal" and result.mappings
    assert {m.explanation.mapping.pp for m in result.mappings} <= {3, 6, 12, 24, 48}


def test_dispatcher_and_cp_comm_choices_follow_the_problem() -> None:
    """MoE on H100: allgather, alltoall and flex; on A100 (no FP8, DeepEP's inter-node kernels need Hopper)
    no flex; pinned by an option the problem sets or listed in `search`; a dense model has none. CP
    types for GQA attention; DeepSeek-V4's hybrid attention keeps the option's."""
    moe = load_problem_text(SMALL_MOE)
    assert dispatcher_choices(moe) == ("allgather", "alltoall", "flex")
    assert dispatcher_choices(load_problem_text(SMALL_MOE.replace("h100-hgx", "a100-hgx"))) == ("allgather", "alltoall")
    pinned = SMALL_MOE.replace("[megatron-core]}", "[megatron-core], options: {moe_token_dispatcher_type: alltoall}}")
    assert dispatcher_choices(load_problem_text(pinned)) == ("alltoall",)
    listed = load_problem_text(SMALL_MOE + "search: {dispatcher: [flex, alltoall], cp_comm_type: a2a}\n")
    assert dispatcher_choices(listed) == ("flex", "alltoall") and cp_comm_choices(listed) == ("a2a",)
    assert dispatcher_choices(load_problem_text(DENSE)) == ()
    assert cp_comm_choices(moe) == ("p2p", "a2a", "allgather", "a2a+p2p")
    hybrid = load_problem("problems/deepseek-v4-pro-1024.yaml")
    assert cp_comm_choices(hybrid) == ("p2p",)
    row = Row(pp=2, vpp=1, tp=1, cp=2, ep=4, etp=1, mbs=1, recompute="none")
    assert len(choice_variants(moe, row)) == 9  # CP 2 has no a2a+p2p split with both levels > 1
    assert {v.dispatcher for v in choice_variants(moe, Row(2, 1, 1, 1, 1, 1, 1, "none"))} == {"allgather"}


def test_bad_search_choice_names_the_field() -> None:
    with pytest.raises(InputError, match="search.dispatcher"):
        load_problem_text(SMALL_MOE + "search: {dispatcher: deepep}\n")


def test_ulysses_bytes_match_the_paper() -> None:
    """DeepSpeed-Ulysses (arXiv 2309.14509 §3.1): a rank's all-to-alls of Q, K, V and the output move
    4·N·h/P elements for multi-head attention (N tokens, hidden h, P ranks); 2 bytes each in BF16."""
    mha = GQAAttention(kind="gqa", num_heads=32, num_kv_heads=32, head_dim=128)
    tokens_per_rank = 8192 / 4
    assert cp_a2a_bytes(mha, tokens_per_rank, tp=1) == 4 * tokens_per_rank * 4096 * 2


def test_cp_comm_types_price_differently() -> None:
    """p2p sends CP−1 chunks, allgather gathers the same K and V at once, a2a moves Q, K, V and O."""
    problem = load_problem_text(SMALL_MOE)
    link = group_link(problem.hardware.topology, Mapping(gpus=64, gbs=256, seq_len=4096, cp=4), "cp")
    block = problem.model.blocks[1]
    terms = {t: cp_comm(problem.model, block, 1024.0, 1, link, t) for t in ("p2p", "a2a", "allgather")}
    assert len({(t.nvlink_s, t.latency_s) for t in terms.values()}) == 3


def test_cp_unhidden_seconds_is_what_an_endless_window_leaves() -> None:
    """pricing.py hides at most overlap_cp (0.50 by default, hardware/calibration.py) of a CP exchange's ring
    part: of 10 s with 4 s blocking, 10 − 0.5·6 = 7 s stay exposed however long the attention; the option
    keys (exchange_keys) read that third."""
    model = CalibratedStageTimes(load_problem_text(SMALL_MOE))
    assert float(model.coefs["overlap_cp"]) == 0.5
    assert cp_unhidden_seconds(10.0, 4.0, model.coefs) == 7.0


def test_a2a_needs_heads_divisible_by_cp() -> None:
    """cp-a2a-heads-divisible: 4 KV heads over TP 1 and CP 8 cannot be split whole."""
    problem = load_problem_text(SMALL_MOE)
    mapping = Mapping(gpus=64, gbs=256, seq_len=4096, tp=1, pp=1, cp=8, ep=8, etp=1)
    bad = explain(with_choices(problem, Row(1, 1, 1, 8, 8, 1, 1, "none", cp_comm="a2a")), mapping, repairs=0)
    assert "cp-a2a-heads-divisible" in [v["rule"] for v in bad.as_dict()["violations"]]
    good = explain(with_choices(problem, Row(1, 1, 1, 8, 8, 1, 1, "none", cp_comm="p2p")), mapping, repairs=0)
    assert "cp-a2a-heads-divisible" not in [v["rule"] for v in good.as_dict()["violations"]]


def test_settled_row_takes_the_fastest_dispatcher_and_emits_it() -> None:
    """On H100 the deduplicating flex dispatch is never slower than the all-to-all for EP 8 across nodes; the
    row keeps it (proved), `solve` shows it in its JSON and `--emit megatron` launches with it."""
    problem = load_problem_text(SMALL_MOE + "search: {tp: [1, 2], pp: [1, 2], vpp: 1, mbs: 1, ep: [8, 16]}\n")
    (row, costs), = settled(problem, Row(1, 1, 1, 1, 16, 1, 1, "none"), CalibratedStageTimes(problem))
    assert row.dispatcher in ("alltoall", "flex")
    result = solve(problem, CalibratedStageTimes(problem), top=3, time_limit_s=300)
    assert result.status == "optimal"
    first = result.mappings[0]
    chosen = first.as_dict()["settings"]["moe_token_dispatcher_type"]
    assert chosen in ("alltoall", "flex") and first.explanation.problem.spec.framework.options.moe_token_dispatcher_type == chosen
    args = dict(megatron_args(first.explanation.problem, first.explanation.mapping).pairs())
    assert args["--moe-token-dispatcher-type"] == first.explanation.problem.spec.framework.options.moe_token_dispatcher_type


def test_exchanges_settle_rows_as_pricing_every_variant_does() -> None:
    """choices.py settles most rows by their EP and CP exchanges alone (the step-time model is
    non-decreasing in each part of them); on MoE rows of every EP/CP/TP placement it keeps the variant
    pricing all of them keeps, with the same tables."""
    problem = load_problem_text(SMALL_MOE)
    model = CalibratedStageTimes(problem)
    compared = 0
    for tp, cp, ep in ((1, 1, 8), (1, 2, 16), (2, 4, 8), (1, 8, 64), (4, 2, 16), (1, 2, 1)):
        row = Row(pp=1, vpp=1, tp=tp, cp=cp, ep=ep, etp=1, mbs=1, recompute="full")
        (_, quick), = settled(problem, row, model)
        (_, full), = settled(problem, row, model, compare=False)
        assert quick.kind_time_us == full.kind_time_us and quick.edge_time_us == full.edge_time_us
        compared += len(choice_variants(problem, row)) > 1
    assert compared == 6


def test_variants_within_an_earlier_ones_exchanges_are_not_priced() -> None:
    """Where no variant's exchange keys are within every other's, settled prices only the variants no earlier
    variant's keys are within, and keeps what pricing every variant keeps (variants and tables), on MoE rows
    with CP of a default-space 8x22B problem."""
    from parasol.solver.search.choices import choice_rules_hold, least_exchanges
    from parasol.solver.search.space import enumerate_rows

    problem = load_problem_text("model: mixtral-8x22b\ntraining: {seq_len: 4096, global_batch: 2048}\n"
                                "hardware: {preset: h100-hgx, gpus: 512}\n")
    model = CalibratedStageTimes(problem)
    rows = [r for r in enumerate_rows(problem) if r.ep > 1 and r.cp > 1 and r.vpp == 1]
    pruned = 0
    for row in rows[::max(len(rows) // 60, 1)][:60]:
        variants = tuple(v for v in choice_variants(problem, row) if choice_rules_hold(problem, v))
        kept = least_exchanges(problem, variants, model.exchange_keys)
        pruned += 1 < len(kept) < len(variants)
        assert settled(problem, row, model) == settled(problem, row, model, compare=False)
    assert pruned


def test_rules_asked_of_the_least_exchanges_first_settle_as_asking_every_variant() -> None:
    """choices.meeting_rules asks the rules of the variant least_exchanges picks alone before the others: what it
    leaves to settle, and what least_exchanges then keeps, are the variants meeting the rules and what
    least_exchanges keeps of those, on MoE rows of DeepSeek-V3 on 2,048 H800 (dispatchers, flex backends and CP
    types) and of the 5T MoE on 16,384 GB200 (HybridEP, whose domain rules refuse some of the fastest), and it
    asks fewer variants than there are."""
    import parasol.solver.search.choices as choices_module
    from parasol.solver.search.choices import choice_rules_hold, least_exchanges, meeting_rules
    from parasol.solver.search.space import enumerate_rows

    asked, listed = [0], 0

    def counted(problem, row):  # noqa: ANN001, ANN202 - choice_rules_hold, counted
        asked[0] += 1
        return choice_rules_hold(problem, row)

    for model, preset, gpus, seq, batch in (("deepseek-v3", "h800-hgx", 2048, 4096, 15360),
                                            ("moe-5t", "gb200-nvl72", 16384, 8192, 8192)):
        problem = load_problem_text(f"model: {model}\ntraining: {{seq_len: {seq}, global_batch: {batch}, "
                                    f"precision: fp8}}\nhardware: {{preset: {preset}, gpus: {gpus}}}\n")
        keys = CalibratedStageTimes(problem).exchange_keys
        rows = [r for r in enumerate_rows(problem) if r.ep > 1]
        for row in rows[::max(len(rows) // 40, 1)][:40]:
            variants = choice_variants(problem, row)
            meeting = tuple(v for v in variants if choice_rules_hold(problem, v)) or variants[:1]
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(choices_module, "choice_rules_hold", counted)
                quick = meeting_rules(problem, variants, keys)
            assert least_exchanges(problem, quick, keys) == least_exchanges(problem, meeting, keys), row
            listed += len(variants)
    assert asked[0] < listed


def test_ep_options_are_the_variants_options_the_grid_rules_accept() -> None:
    """choices.ep_options: a settled row's own dispatcher and backend; an unsettled row's, those of its option
    variants some of which meets the grid-only rules (Hybrid-EP's domain asserts refuse the 5T MoE's EP 64
    groups on eight NVL72 racks when they straddle racks), never a backend the search does not try (NCCL-EP);
    None for a dense model."""
    from parasol.solver.search.choices import choice_rules_hold, ep_options
    from parasol.solver.search.space import enumerate_rows

    problem = load_problem_text("model: moe-5t\ntraining: {seq_len: 4096, global_batch: 1152, precision: fp8}\n"
                                "hardware: {preset: gb200-nvl72, gpus: 576}\n")
    rows = [r for r in enumerate_rows(problem) if r.ep > 1]
    dropped = 0
    for row in rows[::max(len(rows) // 300, 1)]:
        options = ep_options(problem, row)
        variants = choice_variants(problem, row)
        offered = {(v.dispatcher, v.flex_backend or "deepep") for v in variants}
        kept = {(v.dispatcher, v.flex_backend or "deepep") for v in variants if choice_rules_hold(problem, v)}
        assert {(d, b if d == "flex" else "deepep") for d, b in options} == kept, row
        assert all(b != "ncclep" for _, b in options)
        dropped += len(offered) > len(kept)
        for v in variants:
            assert ep_options(problem, v) == ((v.dispatcher, v.flex_backend or "deepep"),)
    assert dropped > 0
    dense = load_problem_text("model: llama-3.1-8b\ntraining: {seq_len: 4096, global_batch: 256}\n"
                              "hardware: {preset: h100-hgx, gpus: 64}\n")
    assert all(ep_options(dense, r) is None for r in enumerate_rows(dense)[:50])


@pytest.mark.parametrize("name", ["deepseek-v4-pro-1024", "qwen3-30b-a3b-h100-64"])
def test_row_derived_sizes_are_its_mappings(name: str) -> None:
    """Row.derived reads a row's derived sizes without building its mapping when they are kept: the very
    object derive gives for the row's mapping, whichever of the two asks first."""
    from parasol.problems.derived import derive
    from parasol.solver.search.space import enumerate_rows

    problem = load_problem(f"problems/{name}.yaml")
    for i, row in enumerate(enumerate_rows(problem)):
        if i % 2:
            assert row.derived(problem) is derive(problem.model, row.mapping(problem)), row
        else:
            assert derive(problem.model, row.mapping(problem)) is row.derived(problem), row

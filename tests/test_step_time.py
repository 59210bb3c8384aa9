"""Step-time model: FLOPs by kind, collective formulas, schedules, and seed 000's A/B/C comparison.

Sources: seed 000 (§PP 和 microbatch: the 1F1B bubble; §CP 降低气泡之后: C halves B's bubble but adds
CP exchange and cuts each expert GEMM to a quarter of the tokens; §公开实验: MFU counts active experts
only), reference/measured-configs.yaml (Megatron-Bridge's own FLOPs per token), and the
formulas cited in constraints/physics/comm.py and constraints/physics/step_time.py.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from functools import cache

import numpy as np
import pytest

from parasol.constraints.physics.comm import (
    CommTerm,
    GroupLink,
    all_gather,
    all_to_all,
    deduplicated_dispatch,
    remote_domains_per_token,
    ring_all_reduce,
)
from parasol.constraints.physics.flops import (
    block_flops,
    dsv4_keys,
    hardware_flops_per_token,
    mean_capped_keys,
    model_flops_per_token,
)
from parasol.constraints.physics.memory import block_kind, stage_block_ranges
from parasol.constraints.physics.pricing import BREAKDOWN_KINDS
from parasol.constraints.physics.schedule import (
    even_stretch,
    least_heaviest_rank,
    least_heaviest_rank_of_kinds,
    pipeline_seconds,
)
from parasol.constraints.physics.step_time import CalibratedStageTimes, step_time, step_time_or_none
from parasol.constraints.physics.workload import StepSettings, build_workload, settings_for
from parasol.errors import InputError
from parasol.hardware.calibration import StepCoefficients, coefficients_for_gpu
from parasol.hardware.topology import Level
from parasol.problems.derived import derive
from parasol.problems.loader import load_problem
from parasol.problems.mapping import Mapping, Recompute
from parasol.problems.model.catalog import load_model
from parasol.problems.model.params import block_params, model_params
from parasol.solver.diagnose.explain import explain

PROBLEMS = "problems"


def _link(size: int, local: int, domains: int, level: Level = Level.rack) -> GroupLink:
    """A group of `size` ranks, `local` per NVLink domain over `domains` domains (NVLink 400, NIC 50 GB/s)."""
    bw = 400.0 if level is Level.nvlink_domain else 50.0
    return GroupLink(kind="x", size=size, level=level, bandwidth_gb_s=bw, latency_us=10.0, local_peers=local,
                     domains=domains, nvlink_gb_s=400.0, network_gb_s=50.0)


def test_dense_flops_are_six_n_t() -> None:
    """Llama 3 8B: 6·N per token without the embedding (a lookup) when attention vanishes (S = 1), and
    51.5 GFLOP per token at S = 8192, the figure Megatron-Bridge prints (744 TFLOP/s at 14,451 tokens/s,
    measured-configs.yaml mbridge-25.11-pretrain-llama3_8b-h100)."""
    model = load_model("llama-3-8b")
    p = model_params(model)
    six_n = 6 * (p.total - p.embedding - p.final_norm)
    assert model_flops_per_token(model, 1) == pytest.approx(six_n, rel=1e-4)
    assert model_flops_per_token(model, 8192) == pytest.approx(744e12 / 14451, rel=5e-3)


def test_moe_flops_count_active_experts_only() -> None:
    """Seed 000 §公开实验: MoE FLOPs use the active experts, not 6·N_total. DeepSeek-V3 (with its MTP
    block) at S = 4096 matches Megatron-Bridge's count (1,635 TFLOP/s at 6,288 tokens/s, entry
    mbridge-26.08-pretrain-deepseekv3-gb300) and is about 6·37B, not 6·671B."""
    model = load_model("deepseek-v3")
    p = model_params(model)
    flops = model_flops_per_token(model, 4096)
    assert flops == pytest.approx(1635e12 / 6288, rel=1e-2)
    mtp_active = sum(block_params(model, b).active(model.moe.top_k) for b in model.mtp_blocks)
    active_gemm = 6 * (p.active_head_only - p.final_norm + mtp_active + p.output_head)
    assert model_flops_per_token(model, 1) == pytest.approx(active_gemm, rel=1e-3)
    assert flops < 0.1 * 6 * p.total


def test_v4_attention_keys_follow_window_and_compression() -> None:
    """V4 hybrid attention (constraints/physics/flops.py): at S = 8192 an HCA query sees the 128-token window plus
    S/(2·128) compressed entries, a CSA query at most index_topk of its p/4 entries (mean 768)."""
    att = load_model("deepseek-v4-pro").attention
    window = 128 - 128 * 127 / (2 * 8192)
    assert dsv4_keys(att, 128, 8192) == pytest.approx(window + 8193 / 256)
    assert mean_capped_keys(8192, 4, 1024) == pytest.approx((4096 * 4097 / 8 + 4096 * 1024) / 8192)
    assert dsv4_keys(att, 4, 8192) == pytest.approx(window + mean_capped_keys(8192, 4, 1024))


def test_ring_all_reduce_inside_a_domain() -> None:
    """Ring all-reduce of 1 GB over 8 ranks on 400 GB/s NVLink: 2·7/8·1e9/400e9 s plus 14 latencies."""
    term = ring_all_reduce(1e9, _link(8, 8, 1, Level.nvlink_domain))
    assert term.nvlink_s == pytest.approx(2 * 7 / 8 / 400)
    assert term.network_s == 0 and term.latency_s == pytest.approx(14 * 10e-6)


def test_ring_collectives_across_domains_use_one_nic_ring_per_local_member() -> None:
    """All-gather of 1 GB over 16 ranks, 8 per domain: the network share runs on 8 NIC rings at once,
    (15/16)·1e9/(8·50e9) s, while NVLink moves the same volume at 400 GB/s; one member per domain gets one NIC."""
    spread = all_gather(1e9, _link(16, 8, 2))
    assert spread.network_s == pytest.approx(15 / 16 / (8 * 50))
    assert spread.nvlink_s == pytest.approx(15 / 16 / 400)
    strided = all_gather(1e9, _link(16, 1, 16))
    assert strided.network_s == pytest.approx(15 / 16 / 50) and strided.nvlink_s == 0


def test_all_to_all_splits_nvlink_and_network_shares() -> None:
    """EP64 on 8-GPU domains, 1 GB sent per rank: 7/64 over NVLink and 56/64 over the NIC, at once."""
    term = all_to_all(1e9, _link(64, 8, 8))
    assert term.nvlink_s == pytest.approx(7 / 64 / 400)
    assert term.network_s == pytest.approx(56 / 64 / 50)
    assert term.seconds() == pytest.approx(56 / 64 / 50 + 10e-6)


def test_deduplicated_dispatch_sends_each_token_once_per_remote_domain() -> None:
    """Seed 000's EP64 spans 8 nodes; with top-6 a token reaches 7·(1 − (7/8)^6) = 3.86 remote nodes on
    average, so the network carries 3.86 copies instead of 6·56/64 = 5.25."""
    assert remote_domains_per_token(8, 6) == pytest.approx(7 * (1 - (7 / 8) ** 6))
    term = deduplicated_dispatch(1e9, 6, _link(64, 8, 8))
    assert term.network_s == pytest.approx(remote_domains_per_token(8, 6) / 50)
    assert term.nvlink_s == pytest.approx(6 * 7 / 8 / 400)
    assert remote_domains_per_token(1, 6) == 0


def test_comm_term_prices_levels_concurrently() -> None:
    """A term's time is the slower level at its achievable fraction, plus latency."""
    term = CommTerm(nvlink_s=1.0, network_s=0.5, latency_s=0.1)
    assert term.seconds(0.5, 1.0) == pytest.approx(2.1)
    assert term.seconds(1.0, 0.25) == pytest.approx(2.1)


@pytest.mark.parametrize(("m", "bubble"), [(32, 7 / 39), (4, 7 / 11), (16, 7 / 23)])
def test_even_1f1b_reproduces_seed_bubbles(m: int, bubble: float) -> None:
    """Seed 000: (p−1)/(m+p−1) with p = 8 is 17.9% (A, m=32), 63.6% (B, m=4), 30.4% (C, m=16)."""
    total = pipeline_seconds(np.ones((1, 8)), m, 1)[0]
    assert (total - m) / total == pytest.approx(bubble)


def test_uneven_and_interleaved_schedules() -> None:
    """Uneven 1F1B: (m−1)·max + Σ = 2·2 + 4 = 8 for stages [1, 2, 1], m = 3. Interleaved v = 2 over four
    equal stages, m = 4: 4 + 3/2, i.e. the (p−1)/(v·m+p−1) = 3/11 bubble."""
    assert pipeline_seconds(np.array([[1.0, 2.0, 1.0]]), 3, 1)[0] == pytest.approx(8)
    total = pipeline_seconds(np.ones((1, 4)), 4, 2)[0]
    assert total == pytest.approx(5.5) and (total - 4) / total == pytest.approx(3 / 11)


@cache
def _seed(gpus: int, cp: int) -> tuple:
    """Seed 000's configuration A (1,024 GPUs), B (8,192) or C (8,192, CP4) and its step time."""
    problem = load_problem(f"{PROBLEMS}/deepseek-v4-pro-{gpus}.yaml")
    mapping = Mapping(gpus=gpus, tp=1, pp=8, cp=cp, ep=64, etp=1, mbs=1, gbs=4096, seq_len=8192)
    return problem, mapping, step_time(problem, mapping, derive(problem.model, mapping))


def test_breakdown_sums_to_the_step_and_stages_are_priced() -> None:
    """The breakdown (compute, exposed communication by kind, bubble) adds up to the step time; every
    stage has a per-microbatch time and the throughput follows from the step (seed 000's A)."""
    _, mapping, st = _seed(1024, 1)
    assert set(st.breakdown) == set(BREAKDOWN_KINDS)
    assert sum(st.breakdown.values()) == pytest.approx(st.step_time_s, rel=1e-9)
    assert len(st.stage_time_s) == 8 and all(t > 0 for t in st.stage_time_s)
    assert st.tokens_per_s == pytest.approx(4096 * 8192 / st.step_time_s)
    assert st.tokens_per_s_per_gpu == pytest.approx(st.tokens_per_s / 1024)
    assert 0 < st.mfu < 1 and st.mfu == pytest.approx(st.mfu_bf16)  # BF16 training: one peak
    assert st.critical_stage == 7  # the last stage also runs the output head, loss and the MTP block


def test_seed_c_against_b_is_explained_by_the_breakdown() -> None:
    """Seed 000 §CP: C (CP4) has about half the bubble of B, but adds CP exchange, keeps the same EP
    traffic per step in smaller pieces, shrinks each expert GEMM to a quarter of the tokens and runs 4×
    the microbatches. C − B equals the sum of the differences by kind, and its sign is the sign of C's
    extra cost (communication, grouped-GEMM loss, per-microbatch overhead) minus B's extra bubble."""
    _, _, b = _seed(8192, 1)
    _, _, c = _seed(8192, 4)
    bubble_b = b.breakdown["bubble"] / (b.step_time_s - sum(b.breakdown[k] for k in ("pp", "dp_dense", "dp_expert",
                                                                                       "optimizer")))
    bubble_c = c.breakdown["bubble"] / (c.step_time_s - sum(c.breakdown[k] for k in ("pp", "dp_dense", "dp_expert",
                                                                                       "optimizer")))
    assert bubble_c < 0.55 * bubble_b
    comm = ("tp", "cp", "ep", "pp", "dp_dense", "dp_expert", "optimizer")
    extra_comm = sum(c.breakdown[k] - b.breakdown[k] for k in comm)
    gemm_loss = c.grouped_gemm_loss_s - b.grouped_gemm_loss_s
    overhead = c.compute_parts["overhead"] - b.compute_parts["overhead"]
    other_compute = (c.breakdown["compute"] - b.breakdown["compute"]) - gemm_loss - overhead
    extra_bubble = b.breakdown["bubble"] - c.breakdown["bubble"]
    assert c.step_time_s - b.step_time_s == pytest.approx(extra_comm + gemm_loss + overhead + other_compute
                                                         - extra_bubble)
    assert gemm_loss > 0 and c.breakdown["cp"] > b.breakdown["cp"] == 0
    assert abs(other_compute) < 0.1 * abs(c.step_time_s - b.step_time_s)
    assert math.copysign(1, c.step_time_s - b.step_time_s) == math.copysign(
        1, extra_comm + gemm_loss + overhead - extra_bubble)


def test_grouped_gemm_efficiency_falls_with_tokens_per_expert() -> None:
    """Seed 000 §CP: C's experts see 2,048 assignments each instead of 8,192; with a larger t_half the
    loss grows, and it vanishes when t_half is 0."""
    problem, mapping, _ = _seed(8192, 4)
    d = derive(problem.model, mapping)
    assert d.assignments_per_expert == 2048
    base = StepCoefficients()
    small = step_time(problem, mapping, d, base.with_values(grouped_gemm_half_tokens=0.0))
    large = step_time(problem, mapping, d, base.with_values(grouped_gemm_half_tokens=2048.0))
    assert small.grouped_gemm_loss_s == pytest.approx(0.0, abs=1e-12)
    assert large.grouped_gemm_loss_s > 0 and large.step_time_s > small.step_time_s


def test_hot_expert_skew_slows_dispatch_and_experts() -> None:
    """The hot-expert option: the busiest EP rank receives `skew`× the mean, so its dispatch and grouped
    GEMMs take longer (seed 000 §CP: the hottest expert, not the mean, sets the time)."""
    problem, mapping, _ = _seed(1024, 1)
    d = derive(problem.model, mapping)
    even = step_time(problem, mapping, d, settings=StepSettings(dispatcher="flex"))
    hot = step_time(problem, mapping, d, settings=StepSettings(dispatcher="flex", hot_expert_skew=1.5))
    assert hot.compute_parts["grouped"] == pytest.approx(1.5 * even.compute_parts["grouped"], rel=1e-6)
    assert hot.breakdown["ep"] > even.breakdown["ep"] and hot.step_time_s > even.step_time_s


def test_full_recompute_costs_time_and_raises_hfu_over_mfu() -> None:
    """Full recompute repeats every block's forward: HFU counts it, MFU does not (seed 000 §公开实验)."""
    problem, mapping, plain = _seed(1024, 1)
    full = mapping.model_copy(update={"recompute": Recompute.full})
    st = step_time(problem, full, derive(problem.model, full))
    assert st.step_time_s > plain.step_time_s and st.breakdown["compute"] > plain.breakdown["compute"]
    assert st.hfu > st.mfu and plain.hfu == pytest.approx(plain.mfu)
    blocks_forward = sum(block_flops(problem.model, b, 8192).total
                         for b in (*problem.model.blocks, *problem.model.mtp_blocks))
    assert hardware_flops_per_token(problem.model, 8192, Recompute.full, ()) == pytest.approx(
        model_flops_per_token(problem.model, 8192) + blocks_forward)


def test_precision_without_a_peak_is_an_input_error() -> None:
    """FP4 GEMMs on an H100 (no FP4 tensor peak in hardware-specs.yaml) name the field and the choices."""
    problem, mapping, _ = _seed(1024, 1)
    with pytest.raises(InputError) as err:
        step_time(problem, mapping, derive(problem.model, mapping), settings=StepSettings(precision="fp4"))
    assert err.value.field == "precision" and "fp8" in err.value.render()


def test_unpriceable_mappings_give_none() -> None:
    """A layout that does not cover the blocks, or grids that do not divide the GPUs, have no step time."""
    problem = load_problem(f"{PROBLEMS}/deepseek-v4-pro-1024.yaml")
    bad = Mapping(gpus=1024, pp=8, ep=64, etp=1, gbs=4096, seq_len=8192, layout=(8,) * 8)
    assert step_time_or_none(problem, bad, derive(problem.model, bad)) is None
    odd = Mapping(gpus=1024, pp=8, cp=3, ep=64, etp=1, gbs=4096, seq_len=8192)
    assert step_time_or_none(problem, odd, derive(problem.model, odd)) is None


def test_explain_reports_step_metrics_and_stage_times() -> None:
    """The BRIEF's explain contract: metrics step_time_s, tokens_per_s_per_gpu, mfu (plus tokens_per_s,
    model_tflops_per_gpu, hfu), stages[i].time_ms, and the step_time breakdown object."""
    problem = load_problem(f"{PROBLEMS}/deepseek-v4-pro-1024.yaml")
    mapping = Mapping(gpus=1024, tp=1, pp=8, cp=1, ep=64, etp=1, mbs=1, gbs=4096, seq_len=8192)
    data = explain(problem, mapping, repairs=0).as_dict()
    metrics = data["metrics"]
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "model_tflops_per_gpu"):
        assert metrics[key] > 0
    assert all(s["time_ms"] > 0 for s in data["stages"])
    assert sum(data["step_time"]["breakdown_s"].values()) == pytest.approx(metrics["step_time_s"], rel=1e-4)
    assert data["step_time"]["precision"] == "bf16"


def test_h800_uses_the_h100_calibration() -> None:
    """H800 is GH100 silicon like the H100 (hardware-specs.yaml): it reads the H100 coefficient file."""
    coefs = coefficients_for_gpu("H800-SXM-80GB")
    assert "h100.yaml" in coefs.source and "H800" in coefs.source
    assert coefficients_for_gpu("A100-SXM4-80GB").source.startswith("defaults")


def test_solver_view_reproduces_the_step_time() -> None:
    """CalibratedStageTimes (the solver's StageTimeModel, solver/search/costs.py): per-stage times from block-kind
    counts equal step_time's, and the 1F1B formula plus the per-step part gives back its step time."""
    problem, mapping, st = _seed(1024, 1)
    d = derive(problem.model, mapping)
    model = CalibratedStageTimes(problem)
    kinds = list(model.kinds)
    stages = []
    for s, blocks in enumerate(stage_block_ranges(d.layout, mapping.pp)):
        counts = [0] * len(kinds)
        for i in blocks:
            counts[kinds.index(block_kind(problem.model.blocks[i]))] += 1
        stages.append((s, tuple(counts)))
    times = model.stage_times_s(mapping, d, stages)
    assert times == pytest.approx(list(st.stage_time_s), rel=1e-9)
    total = pipeline_seconds(np.array([times]), float(d.num_microbatches), mapping.vpp)[0]
    assert total + model.step_extra_s(mapping, d) == pytest.approx(st.step_time_s, rel=1e-9)


def test_fixed_capacity_amplifies_the_dispatch() -> None:
    """Seed 003 §4: with expert capacity factor CF the fixed-size all-to-all moves CF times the balanced
    k·T·h bytes; a problem's capacity_factor reaches the EP exchange through settings_for."""
    problem, mapping, _ = _seed(1024, 1)
    d = derive(problem.model, mapping)
    plain = step_time(problem, mapping, d, settings=StepSettings(dispatcher="alltoall"))
    padded = step_time(problem, mapping, d, settings=StepSettings(dispatcher="alltoall", dispatch_amplification=1.25))
    assert padded.breakdown["ep"] == pytest.approx(1.25 * plain.breakdown["ep"], rel=1e-3)
    capped = problem.spec.model_copy(update={"training": problem.training.model_copy(update={"capacity_factor": 1.25})})
    assert settings_for(replace(problem, spec=capped)).dispatch_amplification == 1.25
    assert settings_for(problem).dispatch_amplification == 1.0


def test_overlap_switches_hide_transfers_only_when_on() -> None:
    """--overlap-grad-reduce/--overlap-param-gather off: the whole DP reduction and gather are exposed;
    on: at most the last backward/first forward they run beside hides them (param_and_grad_buffer.py).
    --tp-comm-overlap off exposes every TP exchange; on, TP hides inside the GEMMs."""
    problem = load_problem(f"{PROBLEMS}/deepseek-v4-pro-1024.yaml")
    mapping = Mapping(gpus=1024, tp=2, pp=8, cp=1, ep=64, etp=1, mbs=1, gbs=4096, seq_len=8192)
    d = derive(problem.model, mapping)
    on = step_time(problem, mapping, d, settings=StepSettings(dispatcher="flex"))
    off = step_time(problem, mapping, d, settings=StepSettings(
        dispatcher="flex", tp_overlap=False, grad_reduce_overlap=False, param_gather_overlap=False))
    work = build_workload(problem, mapping, d, StepSettings(dispatcher="flex"))
    assert off.breakdown["tp"] > on.breakdown["tp"] >= 0
    dp_off = off.breakdown["dp_dense"] + off.breakdown["dp_expert"]
    dp_on = on.breakdown["dp_dense"] + on.breakdown["dp_expert"]
    assert dp_off > dp_on and off.step_time_s > on.step_time_s
    assert work.grad_reduce_overlap == 1.0 and work.tp_overlap == 1.0


def test_settings_read_the_overlap_and_offload_options() -> None:
    """Unset overlap flags are parasol's choice (on where Megatron allows); explicit flags win; the
    optimizer's host share follows --optimizer-offload-fraction."""
    problem = load_problem(f"{PROBLEMS}/deepseek-v4-pro-1024.yaml")
    options = problem.spec.framework.options
    chosen = settings_for(problem, options)
    assert chosen.tp_overlap and chosen.grad_reduce_overlap and chosen.param_gather_overlap
    set_off = options.model_copy(update={"tp_comm_overlap": False, "overlap_grad_reduce": False,
                                         "optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5})
    explicit = settings_for(problem, set_off)
    assert not explicit.tp_overlap and not explicit.grad_reduce_overlap
    assert explicit.optimizer_offload_fraction == 0.5


def test_dualpipe_bubble_is_the_papers_and_below_1f1b() -> None:
    """DualPipe's bubble (PP/2 − 1)(F&B + B − 3W) is below 1F1B's (PP − 1)(F + B) on the same stages
    (DeepSeek-V3 report Table 2)."""
    from parasol.problems.loader import load_problem_text
    from parasol.problems.mapping_input import build_mapping
    text = """
model: llama-3.1-8b
training: {seq_len: 4096, global_batch: 64, pipeline_schedule: %s}
hardware: {preset: h100-hgx, gpus: 8}
"""
    times = {}
    for schedule in ("megatron", "dualpipe"):
        problem = load_problem_text(text % schedule, source=f"{schedule}.yaml")
        mapping = build_mapping(problem, {"pp": "4", "tp": "2"})
        times[schedule] = step_time(problem, mapping, derive(problem.model, mapping))
    one, two = times["megatron"], times["dualpipe"]
    assert 0 < two.breakdown["bubble"] < one.breakdown["bubble"]


def test_scan_runs_at_the_share_of_sms_its_recurrences_fill() -> None:
    """The Mamba-2 state passing runs one program per (sequence, head) (mamba_ssm ssd_state_passing.py):
    Nemotron 3 Super's 128 heads at TP2 and one sequence fill 64 of a GB200's 148 SMs (Blackwell tuning
    guide), four sequences at TP1 fill an H100's 132 (H100 whitepaper); the scan's time scales by the
    inverse share, and models without linear mixers or parts of unknown SM count are unaffected."""
    from parasol.constraints.physics.pricing import batch, coefficient_values, price
    from parasol.constraints.physics.workload import scan_occupancy
    from parasol.hardware.gpu import sm_count

    assert (sm_count("GB200"), sm_count("B300"), sm_count("H800-SXM-80GB"), sm_count("asic-5t")) == (148, 160, 132,
                                                                                                    None)
    sup = load_model("nemotron-3-super-120b-a12b")
    assert scan_occupancy(sup, 1, 2, 148) == pytest.approx(64 / 148)
    assert scan_occupancy(sup, 4, 1, 132) == 1.0 and scan_occupancy(sup, 1, 2, None) == 1.0
    assert scan_occupancy(load_model("llama-3-8b"), 1, 1, 132) == 1.0
    problem = load_problem(f"{PROBLEMS}/deepseek-v4-pro-1024.yaml")
    mapping = Mapping(gpus=64, tp=2, pp=1, ep=64, etp=1, mbs=1, gbs=64, seq_len=8192)
    hybrid = replace(problem, model=sup)
    work = build_workload(hybrid, mapping, derive(sup, mapping))
    assert work.scan_occupancy == pytest.approx(64 / 132)
    coefs = coefficient_values(StepCoefficients())
    slow, full = price(batch([work, replace(work, scan_occupancy=1.0)]), coefs)["scan"]
    assert slow / full == pytest.approx(132 / 64)


def test_output_head_runs_in_bf16_under_fp8() -> None:
    """Megatron's output layer is a plain ColumnParallelLinear, outside Transformer Engine's FP8 autocast
    (megatron/core/models/gpt/gpt_model.py): under FP8 its 2·V·h FLOPs per token (Llama 3 8B: V = 128,256,
    h = 4,096) take forward + input-gradient + weight-gradient passes at the BF16 GEMM rate."""
    from parasol.constraints.physics.pricing import batch, coefficient_values, price

    problem = load_problem(f"{PROBLEMS}/deepseek-v4-pro-1024.yaml")
    model = load_model("llama-3-8b")
    mapping = Mapping(gpus=8, tp=1, pp=1, mbs=1, gbs=8, seq_len=4096)
    work = build_workload(replace(problem, model=model), mapping, derive(model, mapping),
                          StepSettings(precision="fp8"))
    assert work.stages[0].head_flops == pytest.approx(2 * 128256 * 4096 * 4096)
    coefs = coefficient_values(StepCoefficients())
    no_head = replace(work, stages=(replace(work.stages[0], head_flops=0.0),))
    with_head, without = price(batch([work, no_head]), coefs)["gemm"]
    bf16_rate = StepCoefficients().gemm_efficiency * work.bf16_flops
    assert with_head - without == pytest.approx(3 * work.stages[0].head_flops / bf16_rate * work.microbatches)


def test_even_stretch_is_the_pipeline_time_of_equal_stages() -> None:
    """schedule.even_stretch times the stages' summed time is pipeline_seconds of PP equal stages: with
    m = 8, PP = 4, VPP = 2, 4 stages of 1 s give (4 + (16 − 1)·1)/2 = 9.5 s, the stretch 9.5/4."""
    assert even_stretch(4, 2, 8) == pytest.approx(9.5 / 4)
    for pp, vpp, m in [(1, 1, 3), (8, 1, 16), (16, 4, 32), (2, 6, 5)]:
        stages = np.full((1, pp), 0.7)
        assert float(pipeline_seconds(stages, m, vpp)[0]) == pytest.approx(0.7 * pp * even_stretch(pp, vpp, m))


def _assignments(kinds: tuple[int, ...], ranks: int):  # noqa: ANN202 - a test's enumeration
    """Every way to put kinds[k] blocks of each kind k on `ranks` ranks: ranks × kinds count arrays."""
    per_kind = [[c for c in itertools.product(range(n + 1), repeat=ranks) if sum(c) == n] for n in kinds]
    for choice in itertools.product(*per_kind):
        yield np.array(choice).T


def _assert_best_assignment(rng: np.random.Generator, alike: bool, kinds: tuple[int, ...],
                            least: int | np.ndarray, ranks: int) -> None:
    """least_heaviest_rank on random bases and weights (alike: one weight per rank for every kind) against every
    assignment of whole blocks whose rank r holds at least its least (and at most a random most_r where those
    leave room, else without that bound): never above the best, equal to it where the kinds weigh alike."""
    base = rng.uniform(0, 10, ranks)
    weights = np.repeat(rng.uniform(0, 3, (ranks, 1)), len(kinds), axis=1) if alike \
        else rng.uniform(0, 3, (ranks, len(kinds)))
    most = least + rng.integers(-1, 4, ranks)
    totals = np.array(kinds, dtype=np.int64)
    best = capped = np.inf
    for n in _assignments(kinds, ranks):
        held = n.sum(axis=1)
        if (held >= least).all():
            value = float(np.max(base + (weights * n).sum(axis=1)))
            best = min(best, value)
            if (held <= most).all():
                capped = min(capped, value)
    if capped == np.inf:
        capped = best
    bound = least_heaviest_rank(base, weights, totals, least)
    assert bound <= best + 1e-9
    assert least_heaviest_rank(base, weights, totals, least, most) <= capped + 1e-9
    if alike:
        assert bound == pytest.approx(best)
        assert least_heaviest_rank(base, weights, totals, least, most) == pytest.approx(capped)
    lowest = int(np.min(least))
    assert least_heaviest_rank(base, weights, totals, np.full(ranks, lowest)) == least_heaviest_rank(
        base, weights, totals, lowest)


def test_least_heaviest_rank_is_the_best_whole_block_assignment() -> None:
    """schedule.least_heaviest_rank is at most the least largest base_r + Σ_k weights[r, k]·n_rk over every
    assignment of whole blocks of each kind (least <= Σ_k n_rk <= most_r where those leave room, else without
    the upper bound), enumerated on small random cases, and equal to it when every kind weighs alike on
    each rank (where the relaxation is exact)."""
    rng = np.random.default_rng(41)
    for case in range(80):
        ranks, least = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        kinds = tuple(int(n) for n in rng.integers(0, 4, int(rng.integers(1, 3))))
        if sum(kinds) >= ranks * least:
            _assert_best_assignment(rng, case % 2 == 0, kinds, least, ranks)


def test_least_heaviest_rank_with_a_least_per_rank_is_the_best_assignment() -> None:
    """least_heaviest_rank with one least count per rank (empty_stages.least_rank_blocks: none on the first and
    last rank of an interleaved row, whose stages may be empty), checked the same way, and equal to the scalar
    form when every rank's least is the same."""
    rng = np.random.default_rng(43)
    checked = 0
    for case in range(80):
        ranks = int(rng.integers(2, 4))
        least = rng.integers(0, 3, ranks)
        kinds = tuple(int(n) for n in rng.integers(0, 4, int(rng.integers(1, 3))))
        if sum(kinds) >= int(least.sum()):
            _assert_best_assignment(rng, case % 2 == 0, kinds, least, ranks)
            checked += 1
    assert checked >= 40


def test_least_heaviest_rank_of_kinds_is_a_tighter_whole_block_bound() -> None:
    """schedule.least_heaviest_rank_of_kinds is at most the least largest base_r + Σ_k weights[r, k]·n_rk over every
    assignment of whole blocks with at least `least` per rank (enumerated on small random cases with two and three
    kinds), never below least_heaviest_rank, and above it where a few light blocks would otherwise soften every
    rank: DeepSeek-V3's 3 dense and 58 MoE blocks on 16 ranks (weights 1 and 2, no base) need a rank with 4 MoE
    blocks (8), where every rank taking the 3 dense blocks first gives 3·1 + 2 = 5 on the ranks holding 4."""
    rng = np.random.default_rng(43)
    raised = 0
    for _ in range(60):
        ranks, least = int(rng.integers(1, 4)), int(rng.integers(0, 2))
        kinds = tuple(int(n) for n in rng.integers(0, 4, int(rng.integers(2, 4))))
        if sum(kinds) < ranks * least:
            continue
        base, weights = rng.uniform(0, 4, ranks), rng.uniform(0, 3, (ranks, len(kinds)))
        totals = np.array(kinds, dtype=np.int64)
        best = min(float(np.max(base + (weights * n).sum(axis=1))) for n in _assignments(kinds, ranks)
                   if (n.sum(axis=1) >= least).all())
        bound = least_heaviest_rank_of_kinds(base, weights, totals, least)
        assert least_heaviest_rank(base, weights, totals, least) <= bound <= best + 1e-9
        raised += bound > least_heaviest_rank(base, weights, totals, least) + 1e-9
    assert raised > 0
    v3 = (np.zeros(16), np.tile([1.0, 2.0], (16, 1)), np.array([3, 58]), 1)
    assert least_heaviest_rank(*v3) == 5 and least_heaviest_rank_of_kinds(*v3) == 8

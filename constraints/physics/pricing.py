"""Pricing workloads with calibrated coefficients, many at once as numpy arrays: compute time per stage, the
communication each kind leaves exposed after what it can hide behind, the pipeline schedule, the
data-parallel and optimizer time, and the breakdown that sums to the step."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from parasol.constraints.physics.comm import (
    CommTerm,
)
from parasol.constraints.physics.schedule import pipeline_seconds
from parasol.constraints.physics.workload import PASSES_PER_MICROBATCH, Workload
from parasol.hardware.calibration import StepCoefficients

ATTENTION_BACKWARD = 2.5
"""Flash-attention backward over forward time: five matmuls against two, the 2.5× FlashAttention-2
counts for its backward pass (Dao 2023, arXiv 2307.08691)."""


SCAN_BACKWARD = 2.0
"""Mamba-2 scan / gated-delta-rule backward over forward time: a gradient for each of its products
(the 2× of any matmul chain, flops.py BACKWARD_TO_FORWARD)."""


MEMORY_BACKWARD = 2.0
"""Memory-bound backward over forward: each kernel reads its saved input and writes a gradient."""


BREAKDOWN_KINDS = ("compute", "tp", "cp", "ep", "pp", "dp_dense", "dp_expert", "optimizer", "offload", "bubble")


COMM_FIELDS = ("tp", "cp", "cp_blocking", "ep", "recompute_comm", "fsdp_gather", "fsdp_reduce", "dp_dense_reduce",
               "dp_dense_gather", "dp_expert_reduce", "dp_expert_gather")


STAGE_FIELDS = ("blocks", "moe_blocks", "dense_weights", "expert_weights", "gemm_flops", "grouped_flops", "attention_flops", "memory_bytes", "recompute_gemm_flops",
                "recompute_grouped_flops", "recompute_attention_flops", "recompute_memory_bytes",
                "optimizer_bytes", "optimizer_flops", "scan_flops", "recompute_scan_flops", "optimizer_params",
                "offload_bytes", "head_flops")


RUN_FIELDS = ("microbatches", "pp", "vpp", "tokens_per_expert", "skew", "weight_bytes", "main_grad_bytes",
              "precision_level", "peak_flops", "fp8_flops", "bf16_flops",
              "hbm_bytes_per_s", "tokens_per_step", "gpus", "model_flops_per_token", "hardware_flops_per_token",
              "tp_overlap", "grad_reduce_overlap", "param_gather_overlap", "p2p_overlap", "ep_overlap",
              "optimizer_offload_fraction", "host_bytes_per_s", "schedule", "scan_occupancy")


@dataclass(frozen=True)
class WorkloadBatch:
    """Workloads of several runs as arrays: per-stage fields (runs × max stages, zero-padded), per-run fields."""

    stage: dict[str, np.ndarray]
    comm: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    run: dict[str, np.ndarray]
    p2p: tuple[np.ndarray, np.ndarray, np.ndarray]
    mask: np.ndarray
    frozen: np.ndarray

    @property
    def size(self) -> int:
        return int(self.mask.shape[0])


def _term_arrays(terms: list[list[CommTerm]], width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(nvlink, network, latency) seconds of per-stage comm terms, zero-padded to `width` stages."""
    out = [np.zeros((len(terms), width)) for _ in range(3)]
    for i, row in enumerate(terms):
        for j, t in enumerate(row):
            out[0][i, j], out[1][i, j], out[2][i, j] = t.nvlink_s, t.network_s, t.latency_s
    return out[0], out[1], out[2]


def batch(workloads: list[Workload]) -> WorkloadBatch:
    """Stack workloads for vectorised pricing."""
    width = max(len(w.stages) for w in workloads)
    n = len(workloads)
    stage = {f: np.zeros((n, width)) for f in STAGE_FIELDS}
    mask = np.zeros((n, width), dtype=bool)
    for i, w in enumerate(workloads):
        for j, s in enumerate(w.stages):
            mask[i, j] = True
            for f in STAGE_FIELDS:
                stage[f][i, j] = getattr(s, f)
    comm = {f: _term_arrays([[getattr(s, f) for s in w.stages] for w in workloads], width) for f in COMM_FIELDS}
    p2p = tuple(np.array([getattr(w.p2p, a) for w in workloads]) for a in ("nvlink_s", "network_s", "latency_s"))
    run = {f: np.array([float(getattr(w, f)) for w in workloads]) for f in RUN_FIELDS}
    frozen = np.array([w.frozen_weights for w in workloads])
    return WorkloadBatch(stage=stage, comm=comm, run=run, p2p=p2p, mask=mask, frozen=frozen)  # type: ignore[arg-type]


NO_STAGES = MappingProxyType({f: np.zeros((1, 0)) for f in STAGE_FIELDS})
"""batch's stage fields of one workload with no stage (never written: pricing never writes into a batch)."""
NO_STAGE_TERMS = MappingProxyType({f: (np.zeros((1, 0)),) * 3 for f in COMM_FIELDS})
"""batch's comm fields of one workload with no stage."""


def run_batch(w: Workload) -> WorkloadBatch:
    """batch([w]) of a workload with no stage (workload.run_workload's: its run-level fields, all
    batch_from_vectors reads), for a fraction of its cost: the empty stage arrays are shared."""
    return WorkloadBatch(stage=NO_STAGES, comm=NO_STAGE_TERMS,  # type: ignore[arg-type]
                         run={f: np.array([float(getattr(w, f))]) for f in RUN_FIELDS},
                         p2p=tuple(np.array([getattr(w.p2p, a)]) for a in ("nvlink_s", "network_s", "latency_s")),  # type: ignore[arg-type]
                         mask=np.zeros((1, 0), dtype=bool), frozen=np.array([w.frozen_weights]))


STAGE_VECTOR = STAGE_FIELDS + tuple(f"{f}.{part}" for f in COMM_FIELDS for part in ("nvlink_s", "network_s", "latency_s"))
"""The priced fields of one rank's StageWork as one vector: stage fields, then each comm term's three parts."""


_STAGE_AT = {f: i for i, f in enumerate(STAGE_FIELDS)}
"""Where each stage field sits in a STAGE_VECTOR vector (never changed)."""
_COMM_AT = {f: len(STAGE_FIELDS) + 3 * j for j, f in enumerate(COMM_FIELDS)}
"""Where each comm term's three parts start in a STAGE_VECTOR vector (never changed)."""


def vector_columns(fields: tuple[str, ...]) -> np.ndarray:
    """Where the named StageWork fields sit in a STAGE_VECTOR vector (a comm term: its three parts), as a mask."""
    mask = np.zeros(len(STAGE_VECTOR), dtype=bool)
    for f in fields:
        at = _COMM_AT.get(f)
        if at is None:
            mask[_STAGE_AT[f]] = True
        else:
            mask[at:at + 3] = True
    return mask


def stage_field(vectors: np.ndarray, name: str) -> np.ndarray:
    """One stage field (not a comm term) of STAGE_VECTOR vectors (… × fields → …), e.g. a rank's MoE blocks."""
    return vectors[..., _STAGE_AT[name]]


def fields_vector(values: dict[str, float | CommTerm]) -> np.ndarray:
    """Some of a rank's StageWork fields by name as a STAGE_VECTOR vector: every number `price` reads of one
    stage, each comm term as its NVLink, network and latency seconds (zero in the fields not named)."""
    out = [0.0] * len(STAGE_VECTOR)
    for f, value in values.items():
        at = _COMM_AT.get(f)
        if at is None:
            out[_STAGE_AT[f]] = float(value)  # type: ignore[arg-type]
        else:
            out[at], out[at + 1], out[at + 2] = value.nvlink_s, value.network_s, value.latency_s  # type: ignore[union-attr]
    return np.array(out)


def batch_from_vectors(one: WorkloadBatch, stages: np.ndarray) -> WorkloadBatch:
    """N runs of one mapping that differ only in their ranks' work: `stages` is N × ranks × STAGE_VECTOR;
    run-level fields and the pipeline sends are the mapping's (`one`: `batch` of its run-level workload,
    built once per mapping by the caller). Priced by `price` exactly as the workloads that hold those ranks.
    One run takes `one`'s run-level arrays themselves (pricing never writes into a batch)."""
    n, ranks, _ = stages.shape
    width = len(STAGE_FIELDS)
    stage = {f: stages[:, :, i] for i, f in enumerate(STAGE_FIELDS)}
    comm = {f: tuple(stages[:, :, width + 3 * j + part] for part in range(3)) for j, f in enumerate(COMM_FIELDS)}
    if n == one.size:
        run, p2p, frozen = one.run, one.p2p, one.frozen
    else:
        run = {f: np.repeat(v, n) for f, v in one.run.items()}
        p2p = tuple(np.repeat(v, n) for v in one.p2p)
        frozen = np.repeat(one.frozen, n)
    return WorkloadBatch(stage=stage, comm=comm, run=run, p2p=p2p, mask=np.ones((n, ranks), dtype=bool),  # type: ignore[arg-type]
                         frozen=frozen)


Coefs = dict[str, np.ndarray | float]


def _col(x: np.ndarray | float) -> np.ndarray | float:
    """A per-run value as a column against per-stage arrays."""
    return x[:, None] if isinstance(x, np.ndarray) else x


def _priced(term: tuple[np.ndarray, np.ndarray, np.ndarray], c: Coefs, per_stage: bool = True) -> np.ndarray:
    """Seconds of a comm term at the coefficients' achievable link rates."""
    nv, net, lat = term
    e_nv, e_net = c["nvlink_efficiency"], c["network_efficiency"]
    if per_stage:
        e_nv, e_net = _col(e_nv), _col(e_net)
    return np.maximum(nv / e_nv, net / e_net) + lat


def comm_seconds(term: CommTerm, c: Coefs) -> float:
    """Seconds of one comm term at the achievable link rates, as _priced prices a stage's summed terms
    (k equal terms cost k times this)."""
    return max(term.nvlink_s / float(c["nvlink_efficiency"]), term.network_s / float(c["network_efficiency"])) \
        + term.latency_s


def cp_unhidden_seconds(whole: float | np.ndarray, blocking: float | np.ndarray, c: Coefs) -> float | np.ndarray:
    """Seconds of a CP exchange (`whole` seconds, `blocking` of them before the attention) that no attention
    window hides: _exposed_per_microbatch hides at most overlap_cp of its ring part, whole − blocking."""
    return whole - float(c["overlap_cp"]) * (whole - blocking)


def _hidden(comm: np.ndarray, overlap: np.ndarray | float, window: np.ndarray) -> np.ndarray:
    """Communication hidden behind compute: at most `overlap` of it, and never more than the window."""
    return np.minimum(_col(overlap) * comm, window)


def _behind(comm: np.ndarray, switch: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Transfer hidden behind the compute it runs beside when its overlap switch is on (all of it up to
    the window's length), nothing when off: the mechanism, not a fitted share."""
    return _col(switch) * np.minimum(comm, window)


def seconds_per_gemm_flop(r: dict[str, np.ndarray], c: Coefs) -> np.ndarray:
    """GEMM seconds per FLOP by precision: 1/(e_gemm·BF16 peak) for BF16; FP8 halves the share
    fp8_tensor_fraction of that time in proportion to its peak (Amdahl), and FP4 does the same to the
    FP8 time with fp4_tensor_fraction."""
    bf16 = 1.0 / (c["gemm_efficiency"] * r["bf16_flops"])
    fp8 = bf16 * (1 - c["fp8_tensor_fraction"] + c["fp8_tensor_fraction"] * r["bf16_flops"] / r["fp8_flops"])
    fp4 = fp8 * (1 - c["fp4_tensor_fraction"] + c["fp4_tensor_fraction"] * r["fp8_flops"] / r["peak_flops"])
    level = r["precision_level"]
    return np.where(level >= 2, fp4, np.where(level >= 1, fp8, bf16))


def _compute_times(b: WorkloadBatch, c: Coefs, weight_traffic: bool = True) -> dict[str, np.ndarray]:
    """Per-stage compute seconds of one microbatch (runs × stages): each kind forward ('gemm', 'grouped',
    'attention', 'memory', 'overhead'), the GEMMs' backward ('gemm_b', 'grouped_b'), 'ideal_grouped'
    (forward + backward at full grouped-GEMM efficiency), 'recompute', and the totals 'forward',
    'backward'. Without `weight_traffic` a GEMM pass is bound by its FLOPs alone (a lower bound, linear in
    the stage's work)."""
    s, r = b.stage, b.run
    sec_per_flop = _col(seconds_per_gemm_flop(r, c))
    tpe = r["tokens_per_expert"]
    grouped_eff = np.where(tpe > 0, tpe / np.maximum(tpe + c["grouped_gemm_half_tokens"], 1e-9), 1.0)
    sec_grouped = sec_per_flop / _col(grouped_eff) * _col(r["skew"])
    sec_attn = _col(1.0 / (r["bf16_flops"] * c["attention_efficiency"]))
    sec_scan = _col(1.0 / (r["bf16_flops"] * c["scan_efficiency"] * r["scan_occupancy"]))
    sec_byte = _col(1.0 / (r["hbm_bytes_per_s"] * c["hbm_efficiency"]))
    weight_grads = np.where(b.frozen, 0.0, 1.0)[:, None]
    w_read = _col(r["weight_bytes"]) * sec_byte
    w_accumulate = _col(r["main_grad_bytes"]) * sec_byte * weight_grads

    def gemm_passes(flops: np.ndarray, weights: np.ndarray, sec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward) time of GEMMs with `flops` forward FLOPs over `weights` local weights: each
        pass (forward, input gradient, weight gradient) is bound by its FLOPs or by its weight traffic."""
        if not weight_traffic:
            return flops * sec, flops * sec * (1 + weight_grads)
        fwd = np.maximum(flops * sec, weights * w_read)
        wgrad = np.maximum(flops * sec * weight_grads, weights * w_accumulate)
        return fwd, fwd + wgrad

    t: dict[str, np.ndarray] = {}
    t["gemm"], t["gemm_b"] = gemm_passes(s["gemm_flops"], s["dense_weights"], sec_per_flop)
    head, head_b = gemm_passes(s["head_flops"], 0.0 * s["head_flops"], _col(1.0 / (c["gemm_efficiency"] * r["bf16_flops"])))
    t["gemm"], t["gemm_b"] = t["gemm"] + head, t["gemm_b"] + head_b
    t["grouped"], t["grouped_b"] = gemm_passes(s["grouped_flops"], s["expert_weights"], sec_grouped)
    t["ideal_grouped"] = sum(gemm_passes(s["grouped_flops"], s["expert_weights"], sec_per_flop * _col(r["skew"])))
    t["attention"] = s["attention_flops"] * sec_attn
    t["scan"] = s["scan_flops"] * sec_scan
    t["memory"] = s["memory_bytes"] * sec_byte
    t["overhead"] = (_col(c["layer_overhead_us"]) * s["blocks"]
                     + _col(c["moe_layer_overhead_us"]) * s["moe_blocks"]) * 1e-6
    t["recompute"] = (s["recompute_gemm_flops"] * sec_per_flop + s["recompute_grouped_flops"] * sec_grouped
                      + s["recompute_attention_flops"] * sec_attn + s["recompute_memory_bytes"] * sec_byte
                      + s["recompute_scan_flops"] * sec_scan)
    t["forward"] = t["gemm"] + t["grouped"] + t["attention"] + t["scan"] + t["memory"] + t["overhead"]
    t["backward"] = (t["gemm_b"] + t["grouped_b"] + ATTENTION_BACKWARD * t["attention"] + SCAN_BACKWARD * t["scan"]
                     + MEMORY_BACKWARD * t["memory"] + 2 * t["overhead"] + t["recompute"])
    return t


def _exposed_per_microbatch(b: WorkloadBatch, c: Coefs, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Exposed TP, CP, EP, FSDP and activation-offload seconds of one microbatch per stage: forward +
    backward exchanges (CP's backward moves K, V and their gradients). With --tp-comm-overlap TP hides
    inside the block's GEMMs; with --overlap-moe-expert-parallel-comm EP hides behind the other
    microbatch's compute (else up to the overlap_ep share: shared-expert and dispatcher overlap); FSDP's
    gathers and reduce-scatters hide behind compute under --overlap-param-gather/--overlap-grad-reduce;
    a CP ring hides up to overlap_cp behind attention, CP's all-to-alls and all-gathers nothing
    (exchanges.cp_parts); offloaded activations go to the host during the
    forward and return during the backward."""
    r = b.run
    compute = t["forward"] + t["backward"]
    n = PASSES_PER_MICROBATCH
    tp = n["tp"] * _priced(b.comm["tp"], c) + n["recompute_comm"] * _priced(b.comm["recompute_comm"], c)
    cp = n["cp"] * _priced(b.comm["cp"], c)
    cp_ring = cp - n["cp"] * _priced(b.comm["cp_blocking"], c)
    ep = n["ep"] * _priced(b.comm["ep"], c)
    gather = n["fsdp_gather"] * _priced(b.comm["fsdp_gather"], c)
    reduce = n["fsdp_reduce"] * _priced(b.comm["fsdp_reduce"], c)
    gemm_window = t["gemm"] + t["gemm_b"] + t["grouped"] + t["grouped_b"]
    ep_free = _col(r["ep_overlap"])
    ep_hidden = ep_free * np.minimum(ep, compute) + (1 - ep_free) * _hidden(ep, c["overlap_ep"], compute)
    fsdp_hideable = _col(r["param_gather_overlap"]) * gather + _col(r["grad_reduce_overlap"]) * reduce
    host = b.stage["offload_bytes"] / _col(r["host_bytes_per_s"])
    return {
        "tp": tp - _behind(tp, r["tp_overlap"], gemm_window),
        "cp": cp - _hidden(cp_ring, c["overlap_cp"], (1 + ATTENTION_BACKWARD) * t["attention"]),
        "ep": ep - ep_hidden,
        "fsdp": gather + reduce - np.minimum(fsdp_hideable, compute),
        "offload": np.maximum(host - t["forward"], 0.0) + np.maximum(host - t["backward"], 0.0),
    }


DATA_PARALLEL_TERMS = ("dp_dense_reduce", "dp_expert_reduce", "dp_dense_gather", "dp_expert_gather")
"""The comm terms of a rank's data-parallel exchange (_data_parallel_exposure prices their sum per stage)."""


def _data_parallel_seconds(b: WorkloadBatch, c: Coefs) -> list[np.ndarray]:
    """Per stage, the seconds of each DATA_PARALLEL_TERMS term: dense and expert reduce, then gather."""
    return [_priced(b.comm[term], c) for term in DATA_PARALLEL_TERMS]


def _data_parallel_exposure(b: WorkloadBatch, c: Coefs, t: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Exposed (dense, expert) DP seconds per step: with --overlap-grad-reduce the bucketed gradient
    reduce-scatter runs during the last microbatch's backward, with --overlap-param-gather the parameter
    all-gather during the first forward (Megatron-LM distributed/param_and_grad_buffer.py), each hidden up
    to that window; off, each is exposed whole. The slowest stage counts."""
    r = b.run
    dense_reduce, expert_reduce, dense_gather, expert_gather = _data_parallel_seconds(b, c)
    reduce, gather = dense_reduce + expert_reduce, dense_gather + expert_gather
    exposed = reduce - _behind(reduce, r["grad_reduce_overlap"], t["backward"]) + gather - _behind(
        gather, r["param_gather_overlap"], t["forward"])
    exposed = np.where(b.mask, exposed, 0.0)
    total = reduce + gather
    dense_share = np.where(total > 0, (dense_reduce + dense_gather) / np.maximum(total, 1e-30), 0.0)
    return (exposed * dense_share).max(axis=1), (exposed * (1 - dense_share)).max(axis=1)


HOST_STEP_BYTES_PER_PARAM = 4
"""Host-offloaded optimizer step: each parameter's FP32 gradient goes to the host (4 B) while its
updated BF16 weight comes back (2 B) on the other direction, so 4 B per parameter bound the link."""


def optimizer_seconds(b: WorkloadBatch, c: Coefs) -> np.ndarray:
    """Optimizer step of the slowest stage: its state traffic through HBM and Muon's Newton–Schulz GEMMs
    for the share kept on the GPU; the host share (--optimizer-offload-fraction) is bound by the
    gradient and weight transfers over the host link."""
    s, r = b.stage, b.run
    on_host = _col(r["optimizer_offload_fraction"])
    device = (s["optimizer_bytes"] / _col(r["hbm_bytes_per_s"] * c["hbm_efficiency"])
              + s["optimizer_flops"] / _col(r["bf16_flops"] * c["gemm_efficiency"]))
    host = s["optimizer_params"] * HOST_STEP_BYTES_PER_PARAM / _col(r["host_bytes_per_s"])
    seconds = (1 - on_host) * device + on_host * host
    return np.where(b.mask, seconds, 0.0).max(axis=1)


def _schedule_seconds(b: WorkloadBatch, t: dict[str, np.ndarray], stage: np.ndarray,
                      crit: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(pipeline seconds, passes of the slowest rank's stage time). Megatron: schedule.py's formula, m
    passes. DualPipe: a rank's stage time covers both of its stages, each microbatch visits one of them,
    so m/2 passes plus the bubble (PP/2 − 1)(F&B + B − 3W); DualPipeV: m passes plus (2·PP/2 − 1)(F&B +
    B − 3W), PP counting stages there (deepseek-ai/DualPipe README; DeepSeek-V3 report Table 2). One
    stage's F&B + B − 3W is half the rank's forward + 2 × backward − 3 × weight-gradient time (F&B: a
    forward and a backward chunk overlapped, compute adding up)."""
    r = b.run
    m, pp, vpp, schedule = r["microbatches"], r["pp"], r["vpp"], r["schedule"]
    wgrad = (t["gemm_b"] - t["gemm"] + t["grouped_b"] - t["grouped"])[crit]
    chunk = (t["forward"][crit] + 2 * t["backward"][crit] - 3 * wgrad) / 2
    slowest = stage.max(axis=1)
    dualpipe = m / 2 * slowest + np.maximum(pp / 2 - 1, 0) * chunk
    dualpipev = m * slowest + np.maximum(pp - 1, 0) * chunk
    pipeline = np.where(schedule == 1, dualpipe, np.where(schedule == 2, dualpipev, pipeline_seconds(stage, m, vpp)))
    return pipeline, np.where(schedule == 1, m / 2, m)


def price(b: WorkloadBatch, c: Coefs) -> dict[str, np.ndarray]:
    """Step time and its parts for every run of the batch under coefficients `c` (scalars or per-run arrays).

    Returns arrays: per-run 'step', breakdown kinds (BREAKDOWN_KINDS, summing to 'step'), 'pipeline',
    'critical' (the slowest stage), the critical stage's compute parts per step ('gemm', 'grouped',
    'attention', 'scan', 'memory', 'overhead', 'recompute', 'grouped_loss': time lost to grouped-GEMM
    inefficiency), and per-stage 'forward', 'backward', 'stage' (forward + backward + exposed
    TP/CP/EP/FSDP of one microbatch)."""
    r = b.run
    t = _compute_times(b, c)
    compute = t["forward"] + t["backward"]
    exposed = _exposed_per_microbatch(b, c, t)
    stage = np.where(b.mask, compute + exposed["tp"] + exposed["cp"] + exposed["ep"] + exposed["fsdp"]
                     + exposed["offload"], 0.0)
    m_all, pp, vpp = r["microbatches"], r["pp"], r["vpp"]
    slowest = stage.max(axis=1)
    crit = (np.arange(b.size), stage.argmax(axis=1))
    pipeline, m = _schedule_seconds(b, t, stage, crit)
    p2p = _priced(b.p2p, c, per_stage=False) * vpp
    hidden_p2p = r["p2p_overlap"] * np.minimum(p2p, slowest)
    exposed_pp = np.where(pp > 1, m_all * (p2p - hidden_p2p) + (pp - 1) * p2p, 0.0)
    dp_dense, dp_expert = _data_parallel_exposure(b, c, t)
    optimizer = optimizer_seconds(b, c)
    grouped = t["grouped"][crit] + t["grouped_b"][crit]
    return {
        "step": pipeline + exposed_pp + dp_dense + dp_expert + optimizer,
        "compute": m * compute[crit],
        "tp": m * exposed["tp"][crit],
        "cp": m * exposed["cp"][crit],
        "ep": m * exposed["ep"][crit],
        "pp": exposed_pp,
        "dp_dense": dp_dense + m * exposed["fsdp"][crit],
        "dp_expert": dp_expert,
        "optimizer": optimizer,
        "offload": m * exposed["offload"][crit],
        "bubble": pipeline - m * slowest,
        "pipeline": pipeline,
        "critical": crit[1],
        "forward": t["forward"],
        "backward": t["backward"],
        "stage": stage,
        "grouped_loss": m * (grouped - t["ideal_grouped"][crit]),
        "gemm": m * (t["gemm"][crit] + t["gemm_b"][crit]),
        "grouped": m * grouped,
        "attention": m * t["attention"][crit] * (1 + ATTENTION_BACKWARD),
        "scan": m * t["scan"][crit] * (1 + SCAN_BACKWARD),
        "memory": m * t["memory"][crit] * (1 + MEMORY_BACKWARD),
        "overhead": m * t["overhead"][crit] * 3,
        "recompute": m * t["recompute"][crit],
    }


def rank_floor_per_microbatch(b: WorkloadBatch, c: Coefs, recompute_s: float) -> np.ndarray:
    """Per stage, seconds of one microbatch that its forward, backward and exposed TP and FSDP exchanges
    (price's stage time less CP, EP and offload) never go below, and that bound the sum over ranks when
    `b` holds the ranks' summed work (comm seconds of summed terms are at most the sum of the ranks'; the
    compute likewise, its part beside the GEMMs exactly). The largest of: the compute plus the exchanges
    the overlap switches leave unhidden; the whole FSDP exchange, which hides only behind compute; the
    whole TP exchange, which hides only behind the GEMMs (less the recomputed forward's exchanges, whose
    EP share depends on the dispatcher: `recompute_s`, seconds those never go below under any dispatcher the caller
    allows, joins the TP exchange, as they are priced with it)."""
    r = b.run
    t = _compute_times(b, c)
    compute = t["forward"] + t["backward"]
    n = PASSES_PER_MICROBATCH
    tp = n["tp"] * _priced(b.comm["tp"], c) + recompute_s
    gather = n["fsdp_gather"] * _priced(b.comm["fsdp_gather"], c)
    reduce = n["fsdp_reduce"] * _priced(b.comm["fsdp_reduce"], c)
    fsdp_left = (1 - _col(r["param_gather_overlap"])) * gather + (1 - _col(r["grad_reduce_overlap"])) * reduce
    tp_left = (1 - _col(r["tp_overlap"])) * tp
    return np.maximum.reduce([compute + fsdp_left + tp_left, gather + reduce + tp_left,
                              _beside_gemms(t, compute) + tp + fsdp_left])


def compute_beside_gemms_per_microbatch(b: WorkloadBatch, c: Coefs) -> tuple[np.ndarray, np.ndarray]:
    """Per stage, (forward plus backward compute seconds of one microbatch, recompute included; its part beside
    the GEMMs), from one _compute_times. The compute is the first term of rank_floor_per_microbatch less its
    exchanges, so never above it (exposed exchanges are never negative), and, like it, at most the sum over
    ranks when `b` holds the ranks' summed work; the part beside the GEMMs is the window-free share
    rank_floor_per_microbatch adds the whole TP exchange to."""
    t = _compute_times(b, c)
    compute = t["forward"] + t["backward"]
    return compute, _beside_gemms(t, compute)


def _beside_gemms(t: dict[str, np.ndarray], compute: np.ndarray) -> np.ndarray:
    """The part of `compute` (forward plus backward, from _compute_times `t`) outside the GEMM passes: what no
    TP overlap hides an exchange behind."""
    return compute - (t["gemm"] + t["gemm_b"] + t["grouped"] + t["grouped_b"])


def linear_compute_per_microbatch(b: WorkloadBatch, c: Coefs) -> np.ndarray:
    """The compute of compute_beside_gemms_per_microbatch with every GEMM pass bound by its FLOPs alone, never
    above it: linear in the stage's work, so a rank's value is its edge's plus its blocks' (a per-rank bound on
    the slowest rank, CalibratedStageTimes.step_floor_s)."""
    t = _compute_times(b, c, weight_traffic=False)
    return t["forward"] + t["backward"]


def pipeline_sends_floor(b: WorkloadBatch, c: Coefs, vpp: int) -> np.ndarray:
    """Per run, seconds of pipeline sends no overlap hides, when `b`'s one stage holds all ranks' summed
    work, at `vpp` virtual stages per rank (nothing else here reads VPP): the sends that fill and drain the
    pipeline plus the unhidden share of the rest. price's 'pp' never goes below it."""
    r = b.run
    return unhidden_sends_seconds(_priced(b.p2p, c, per_stage=False), r["microbatches"], r["pp"], vpp,
                                  r["p2p_overlap"])


def unhidden_sends_seconds(p2p, m, pp, vpp, overlap):  # noqa: ANN001, ANN201 - numbers or numpy arrays alike
    """Seconds of pipeline sends no overlap hides, one send of a microbatch at a stage boundary taking `p2p` seconds,
    `vpp` of them per rank: those that fill and drain the pipeline, and the share the --overlap-p2p-comm switch
    (`overlap`) leaves of the rest (pipeline_sends_floor)."""
    return (pp > 1) * (m * (1 - overlap) + (pp - 1)) * p2p * vpp


def data_parallel_floor(b: WorkloadBatch, c: Coefs) -> tuple[np.ndarray, np.ndarray]:
    """Per run, when `b`'s one stage holds all ranks' summed work: (an average stage's data-parallel
    exchange seconds its overlap switches leave exposed whatever the window, an average stage's whole
    exchange seconds). price's 'dp_dense' + 'dp_expert' is the slowest stage's exposure, at least every
    stage's: at least the first, and at least a stage's whole exchange less its forward and backward (the
    windows _data_parallel_exposure hides it behind), so at least the second less the slowest stage's time
    (the caller bounds that; the largest exchange is at least the mean, and the summed work's exchange
    at most the sum of the stages')."""
    r = b.run
    pp = r["pp"]
    dense_reduce, expert_reduce, dense_gather, expert_gather = _data_parallel_seconds(b, c)
    reduce, gather = dense_reduce + expert_reduce, dense_gather + expert_gather
    exposed = (1 - _col(r["grad_reduce_overlap"])) * reduce + (1 - _col(r["param_gather_overlap"])) * gather
    return exposed.sum(axis=1) / pp, (reduce + gather).sum(axis=1) / pp


WHOLE_TERMS = (1.0,) * len(DATA_PARALLEL_TERMS)
"""Every DATA_PARALLEL_TERMS term counted whole (data_parallel_whole_seconds, data_parallel_lines)."""


def data_parallel_whole_seconds(b: WorkloadBatch, c: Coefs, shares: tuple[float, ...] = WHOLE_TERMS) -> np.ndarray:
    """Per stage, its whole data-parallel exchange seconds (every DATA_PARALLEL_TERMS term, hidden or not): what
    _data_parallel_exposure hides behind the stage's own forward and backward; with `shares`, each term's share of
    its seconds (e.g. data_parallel_unhidden_shares)."""
    return sum(share * seconds for share, seconds in zip(shares, _data_parallel_seconds(b, c), strict=True))


def data_parallel_unhidden_shares(b: WorkloadBatch) -> tuple[float, ...]:
    """unhidden_shares of the overlap switches of `b`'s one run."""
    r = b.run
    return unhidden_shares(float(r["grad_reduce_overlap"][0]), float(r["param_gather_overlap"][0]))


def unhidden_shares(grad_reduce_overlap: float, param_gather_overlap: float) -> tuple[float, ...]:
    """Per DATA_PARALLEL_TERMS term, the share of its seconds no overlap switch hides whatever the window (each switch
    1.0 on, 0.0 off, as a run holds it): all of a reduce without --overlap-grad-reduce, of a gather without
    --overlap-param-gather, none with (_data_parallel_exposure hides at most the whole term behind its window)."""
    reduce, gather = 1.0 - grad_reduce_overlap, 1.0 - param_gather_overlap
    return reduce, reduce, gather, gather


def data_parallel_lines(base: np.ndarray, per_block: np.ndarray, c: Coefs, shares: tuple[float, ...] = WHOLE_TERMS
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, (a_r, b_rk) with a_r + Σ_k b_rk·n_k at most the seconds of its whole data-parallel exchange
    when it holds n_k blocks of each kind k (at least one in all), from rank vectors (STAGE_VECTOR) `base`
    (ranks × fields: what it holds with the least onset one block brings) and `per_block` (ranks × kinds ×
    fields: what each block of a kind adds at least), every comm part growing with blocks: each term's
    seconds max(nvlink/e, network/e) + latency are at least either part plus the latency, both linear in
    the counts; per rank and term the part larger at one block of the average kind is taken. With `shares`,
    at most each term's share of its seconds summed (data_parallel_whole_seconds)."""
    width = len(STAGE_FIELDS)
    a = np.zeros(base.shape[0])
    b = np.zeros(per_block.shape[:2])
    for term, share in zip(DATA_PARALLEL_TERMS, shares, strict=True):
        if share == 0.0:
            continue
        at = width + 3 * COMM_FIELDS.index(term)
        lines = [(base[:, at + part] / float(c[efficiency]), per_block[:, :, at + part] / float(c[efficiency]))
                 for part, efficiency in ((0, "nvlink_efficiency"), (1, "network_efficiency"))]
        network = lines[1][0] + lines[1][1].mean(axis=1) >= lines[0][0] + lines[0][1].mean(axis=1)
        a += share * (np.where(network, lines[1][0], lines[0][0]) + base[:, at + 2])
        b += share * (np.where(network[:, None], lines[1][1], lines[0][1]) + per_block[:, :, at + 2])
    return a, b


def coefficient_values(coefficients: StepCoefficients) -> Coefs:
    """StepCoefficients as the name → value mapping `price` reads."""
    return dict(coefficients.values())

"""Hardware layer: presets, usable HBM, rank placement, bandwidth by level, graph check, errors."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from parasol.errors import CatalogError, InputError
from parasol.hardware.gpu import GPUSpec, default_runtime_reserve_gb
from parasol.hardware.presets import hardware_from_spec, load_preset, preset_names
from parasol.hardware.topology import ClusterTopology, Level, bottleneck_bandwidth

REQUIRED_PRESETS = {"h100-hgx", "h800-hgx", "h200-hgx", "b200-hgx", "gb200-nvl72", "gb300-nvl72", "a100-hgx", "asic-5t"}
HARDWARE_DIR = Path(__file__).resolve().parents[1] / "hardware"


def small_racks(preset: str, nodes_per_rack: int, oversubscription: float = 2.0) -> ClusterTopology:
    """A preset's topology with small leaf groups and an oversubscribed spine, so graphs stay small."""
    return hardware_from_spec({
        "preset": preset,
        "topology": {"nodes_per_rack": nodes_per_rack, "spine_oversubscription": oversubscription},
    }).topology


def test_required_presets_are_bundled() -> None:
    assert set(preset_names()) >= REQUIRED_PRESETS


@pytest.mark.parametrize("name", preset_names())
def test_each_preset_loads_with_usable_hbm_below_capacity(name: str) -> None:
    hw = load_preset(name)
    assert hw.name == name and hw.description and hw.sources
    assert 0 < hw.gpu.usable_hbm_gb < hw.gpu.hbm_gb
    assert hw.gpu.usable_hbm_bytes < hw.gpu.hbm_bytes == round(hw.gpu.hbm_gb * 1e9)
    assert hw.gpu.runtime_reserve_gb == pytest.approx(default_runtime_reserve_gb(hw.gpu.hbm_gb))
    assert hw.topology.validate_gpu_count(hw.topology.gpus_per_rack) == hw.topology.nodes_per_rack


def test_preset_figures_match_reference() -> None:
    h100, h800, nvl72 = load_preset("h100-hgx"), load_preset("h800-hgx"), load_preset("gb200-nvl72")
    assert (h100.topology.nvlink_gb_s, h100.topology.nic_gb_s, h100.topology.gpus_per_node) == (450, 50, 8)
    assert (h800.topology.nvlink_gb_s, h800.topology.nic_gb_s) == (200, 50)
    assert (nvl72.topology.gpus_per_node, nvl72.topology.gpus_per_nvlink_domain, nvl72.topology.nvlink_gb_s) == (4, 72, 900)
    assert load_preset("asic-5t").topology.fixed_size_all_to_all
    assert not h100.topology.fixed_size_all_to_all


def test_peak_flops_by_precision() -> None:
    h100, a100 = load_preset("h100-hgx").gpu, load_preset("a100-hgx").gpu
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)
    assert h100.peak_flops("FP8") == pytest.approx(1978.9e12)
    with pytest.raises(InputError) as err:
        a100.peak_flops("fp8")
    assert err.value.field == "precision" and "bf16" in err.value.render()


def test_reserve_defaults_by_rule_and_must_stay_below_capacity() -> None:
    spec = GPUSpec(name="x", bf16_dense_tflops=100, hbm_gb=100, hbm_tb_s=1)
    assert spec.runtime_reserve_gb == pytest.approx(7.0) and spec.usable_hbm_gb == pytest.approx(93.0)
    with pytest.raises(ValueError, match="below hbm_gb"):
        GPUSpec(name="x", bf16_dense_tflops=100, hbm_gb=10, hbm_tb_s=1, runtime_reserve_gb=10)


def test_rank_placement_under_launcher_layout() -> None:
    nvl72 = load_preset("gb200-nvl72").topology
    assert [nvl72.node_of(r) for r in (0, 3, 4, 71, 72)] == [0, 0, 1, 17, 18]
    assert [nvl72.domain_of(r) for r in (0, 71, 72)] == [0, 0, 1]
    assert [nvl72.rack_of(r) for r in (0, 575, 576)] == [0, 0, 1]
    with pytest.raises(InputError):
        nvl72.node_of(-1)


@pytest.mark.parametrize(
    ("preset", "a", "b", "level", "gb_s"),
    [
        ("h100-hgx", 0, 0, Level.same_gpu, math.inf),
        ("h100-hgx", 0, 1, Level.nvlink_domain, 450),
        ("h100-hgx", 0, 8, Level.rack, 50),
        ("h800-hgx", 0, 7, Level.nvlink_domain, 200),
        ("gb200-nvl72", 0, 8, Level.nvlink_domain, 900),
        ("gb200-nvl72", 0, 72, Level.rack, 50),
        ("gb300-nvl72", 0, 72, Level.rack, 100),
    ],
)
def test_bandwidth_levels(preset: str, a: int, b: int, level: Level, gb_s: float) -> None:
    topo = load_preset(preset).topology
    assert topo.level_between(a, b) is level
    assert topo.bandwidth_between(a, b) == gb_s


def test_spine_level_pays_oversubscription() -> None:
    topo = small_racks("h100-hgx", nodes_per_rack=2, oversubscription=4.0)
    assert topo.level_between(0, 16) is Level.spine
    assert topo.bandwidth_between(0, 16) == pytest.approx(12.5)
    assert Level.same_gpu.depth < Level.nvlink_domain.depth < Level.rack.depth < Level.spine.depth


@pytest.mark.parametrize(
    ("preset", "nodes_per_rack", "num_gpus"),
    [("h100-hgx", 2, 48), ("gb200-nvl72", 36, 216), ("asic-5t", 4, 64), ("a100-hgx", 4, 64)],
)
def test_graph_bottleneck_equals_closed_form(preset: str, nodes_per_rack: int, num_gpus: int) -> None:
    topo = small_racks(preset, nodes_per_rack)
    graph = topo.graph(num_gpus)
    last = num_gpus - 1
    pairs = [(0, 0), (0, 1), (0, topo.gpus_per_nvlink_domain), (0, topo.gpus_per_rack), (1, last), (last, 0)]
    seen = set()
    for a, b in pairs:
        seen.add(topo.level_between(a, b))
        assert bottleneck_bandwidth(graph, a, b) == topo.bandwidth_between(a, b), (a, b)
    assert seen == set(Level)


def test_ep64_on_hgx_spans_eight_nodes_and_on_nvl72_one_domain() -> None:
    ep64 = range(64)
    hgx = load_preset("h100-hgx").topology.group_span(ep64)
    assert (hgx.size, hgx.nodes, hgx.domains, hgx.level, hgx.bandwidth_gb_s) == (64, 8, 8, Level.rack, 50)
    nvl = load_preset("gb200-nvl72").topology.group_span(ep64)
    assert (nvl.nodes, nvl.domains, nvl.level, nvl.bandwidth_gb_s) == (16, 1, Level.nvlink_domain, 900)


def test_group_span_of_strided_and_single_groups() -> None:
    topo = small_racks("h100-hgx", nodes_per_rack=4)
    dp = topo.group_span(range(0, 128, 16))
    assert (dp.nodes, dp.racks, dp.level, dp.bandwidth_gb_s) == (8, 4, Level.spine, 25)
    assert topo.group_span([112, 0, 48, 16, 96, 32, 80, 64]) == dp
    one = topo.group_span([5])
    assert (one.level, one.bandwidth_gb_s, one.latency_us) == (Level.same_gpu, math.inf, 0.0)
    with pytest.raises(InputError, match="twice"):
        topo.group_span([1, 1])


def test_partial_node_jobs_place_the_same_ranks_on_every_node() -> None:
    """Any positive job size is placed (torchrun starts the same --nproc_per_node on every node): whole
    nodes when it fills them, else the largest count per node that divides it; a pin must divide it."""
    topo = load_preset("h100-hgx").topology
    assert topo.validate_gpu_count(1024) == 128
    assert [topo.ranks_per_node(n) for n in (4, 7, 9, 12, 27, 63, 1030)] == [4, 7, 3, 6, 3, 7, 5]
    assert topo.for_job(1024) is topo
    job = topo.for_job(9)
    assert (job.gpus_per_node, job.gpus_per_nvlink_domain, job.idle_gpus_per_node) == (3, 3, 5)
    assert job.group_span(range(9)).nodes == 3 and job.group_span(range(9)).level is Level.rack
    assert topo.for_job(16, ranks_per_node=4).gpus_per_node == 4
    nvl72 = load_preset("gb200-nvl72").topology.for_job(54)
    assert (nvl72.gpus_per_node, nvl72.gpus_per_nvlink_domain) == (3, 54)
    with pytest.raises(InputError) as err:
        topo.for_job(12, ranks_per_node=5)
    assert err.value.field == "hardware.ranks_per_node" and "dividing 12" in err.value.expected
    with pytest.raises(InputError, match="hardware.gpus"):
        topo.validate_gpu_count(0)


def test_unknown_preset_lists_names() -> None:
    with pytest.raises(CatalogError) as err:
        load_preset("h100-hgz")
    assert err.value.field == "hardware.preset"
    assert all(name in err.value.expected for name in REQUIRED_PRESETS)
    assert "h100-hgx" in err.value.fix


def test_hardware_from_spec_name_overrides_and_inline() -> None:
    assert hardware_from_spec("h800-hgx") == load_preset("h800-hgx")
    merged = hardware_from_spec({"preset": "h100-hgx", "topology": {"spine_oversubscription": 3}})
    assert merged.name == "h100-hgx+overrides"
    assert merged.topology.spine_oversubscription == 3 and merged.topology.nvlink_gb_s == 450
    assert merged.gpu == load_preset("h100-hgx").gpu
    inline = hardware_from_spec({
        "gpu": {"name": "X1", "bf16_dense_tflops": 500, "hbm_gb": 64, "hbm_tb_s": 2},
        "topology": {"gpus_per_node": 4, "gpus_per_nvlink_domain": 4, "nodes_per_rack": 8, "nvlink_gb_s": 100,
                     "nic_gb_s": 25, "nvlink_latency_us": 3, "rack_latency_us": 10, "spine_latency_us": 12},
    })
    assert inline.name == "inline" and inline.topology.bandwidth_between(0, 4) == 25


def test_bad_overrides_name_the_field() -> None:
    with pytest.raises(InputError) as err:
        hardware_from_spec({"preset": "h100-hgx", "topology": {"nvlnk_gb_s": 900}})
    assert err.value.field == "hardware.topology.nvlnk_gb_s" and "nvlink_gb_s" in err.value.fix
    with pytest.raises(InputError) as err:
        hardware_from_spec({"preset": "h100-hgx", "topology": {"gpus_per_nvlink_domain": 12}})
    assert err.value.field == "hardware.topology" and "multiple of gpus_per_node" in str(err.value)
    with pytest.raises(InputError, match="hardware"):
        hardware_from_spec(42)  # type: ignore[arg-type]


def test_hardware_imports_nothing_above_it() -> None:
    for path in HARDWARE_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                for name in names:
                    assert not name.startswith(("parasol.problems", "parasol.constraints", "parasol.solver")), path


@pytest.mark.parametrize("preset, mib", [("h100-hgx", 81_559), ("h800-hgx", 81_559), ("a100-hgx", 81_920),
                                         ("h200-hgx", 143_771)])
def test_hbm_is_what_the_driver_reports(preset: str, mib: int) -> None:
    """NVML memory.total of an H100 80GB (and the H800's same HBM3 part), an A100 80GB and an H200, in MiB
    (https://thundergolfer.com/blog/nvidia-gpu-memory-capacity): the datasheets' 80 / 141 GB are binary
    gigabytes; hbm_gb is the reading in decimal GB, and usable HBM takes the reserve rule off it."""
    gpu = load_preset(preset).gpu
    assert gpu.hbm_gb == round(mib * 2**20 / 1e9, 2)
    assert gpu.usable_hbm_gb == pytest.approx(gpu.hbm_gb - default_runtime_reserve_gb(gpu.hbm_gb))

"""DeepSeek-V4's CP exchange as Megatron-LM's THD CP path runs it (dev@d48bd6be): the D_window hidden rows left
of a rank's own come from the previous rank and are waited for (cp_utils.py:124-202); a CSA block gathers
its compressed index keys and KV asynchronously and waits after its indexer projections and top-k
(csa.py:2643-2751); an HCA block gathers its compressed KV synchronously (csa.py:2752-2755)."""

from __future__ import annotations

import pytest

from parasol.constraints.physics.comm import NO_COMM, group_link
from parasol.constraints.physics.exchanges import cp_parts
from parasol.problems.loader import load_problem
from parasol.problems.mapping import Mapping

US = 1e-6


def test_dsv4_cp_parts_by_hand() -> None:
    """The bundled V4-Pro 1,024 problem (hidden 7,168, window 128, head dim 512, index head dim 128; H800:
    NVLink 200 GB/s, 3.4 us a hop), CP 4 inside a node, 1,024 tokens a rank. Halo: max(128, d_comp) = 128
    rows of 7,168 BF16 = 1,835,008 B, one step: 9.175 us + 3.4 us, blocking in every block. HCA (ratio 128):
    the 4·1024/128 compressed rows of 512, 32,768 B gathered, 3/4 of them received: 0.123 us + 3 hops, also
    blocking. CSA (ratio 4): 4·1024/4 rows of 512 + 128, 1,310,720 B gathered: 4.915 us + 3 hops, hidden
    like a ring's steps."""
    problem = load_problem("problems/deepseek-v4-pro-1024.yaml")
    model = problem.model
    link = group_link(problem.hardware.topology, Mapping(gpus=1024, gbs=1024, seq_len=4096, cp=4), "cp")
    assert (link.size, link.local_peers, link.nvlink_gb_s) == (4, 4, 200.0)
    hca = next(b for b in model.blocks if b.compress_ratio == 128)
    csa = next(b for b in model.blocks if b.compress_ratio == 4)
    halo_s = 1_835_008 / 200e9
    ring, blocking = cp_parts(model, hca, 1024.0, 1, link)
    assert ring == NO_COMM
    assert blocking.nvlink_s == pytest.approx(halo_s + 0.75 * 32_768 / 200e9)
    assert blocking.latency_s == pytest.approx((3.4 + 3 * 3.4) * US)
    ring, blocking = cp_parts(model, csa, 1024.0, 1, link)
    assert blocking.nvlink_s == pytest.approx(halo_s) and blocking.latency_s == pytest.approx(3.4 * US)
    assert ring.nvlink_s == pytest.approx(0.75 * 1_310_720 / 200e9)
    assert ring.latency_s == pytest.approx(3 * 3.4 * US)


def test_dsv4_window_only_block_waits_for_its_halo() -> None:
    """A block without compression (ratio 0) exchanges only its 128 window rows, blocking."""
    problem = load_problem("problems/deepseek-v4-pro-1024.yaml")
    model = problem.model
    plain = model.blocks[0].model_copy(update={"compress_ratio": 0})
    link = group_link(problem.hardware.topology, Mapping(gpus=1024, gbs=1024, seq_len=4096, cp=4), "cp")
    ring, blocking = cp_parts(model, plain, 1024.0, 1, link)
    assert ring == NO_COMM and blocking.seconds() == pytest.approx(1_835_008 / 200e9 + 3.4 * US)

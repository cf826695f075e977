"""The peer's estimate beside the planner's in the transfer report (calibration/transfer_peer.py): the
peer is aiconfigurator-core 0.12.0's own compiled step model, unpacked from the cached wheel (`make
tables-wheel`), asked directly here to check what the report quotes."""
from __future__ import annotations

import contextlib
import io
import sys
import zipfile

import pandas as pd
import pytest

from calibration import gpu_tables as gt
from calibration import transfer_peer as tp
from calibration.transfer import CORPUS
from calibration.transfer_cases import case_for

pytestmark = [pytest.mark.transfer, pytest.mark.slow, pytest.mark.skipif(not gt.tables_available(), reason=(
    "aiconfigurator-core 0.12.0 wheel not cached: run `make tables-wheel`"))]


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    """aiconfigurator_core importable from a folder the wheel is unpacked into (never installed)."""
    root = tmp_path_factory.mktemp("peer")
    with zipfile.ZipFile(gt._cached_wheel()) as z:
        z.extractall(root, [n for n in z.namelist() if n.startswith("aiconfigurator_core/")])
    sys.path.insert(0, str(root))
    try:
        from aiconfigurator_core.sdk.engine import EngineHandle
        yield EngineHandle
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m.startswith("aiconfigurator_core")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def step_ms(peer):
    """The peer's step for the DeepSeek-R1 rows, its arguments given here by hand (8 x B200, TensorRT-LLM, nvfp4
    experts, batch 1, 1k/2k tokens), asked through the module's kept answers (each costs 2-3 s of native work on
    the 2-core box): a row whose arguments the module derives differently is asked anew and its answer differs."""
    def ask(nextn: int, **kw) -> float:
        options = tuple(sorted((kw | {"moe_quant_mode": "nvfp4"}).items()))
        return tp._peer_step_ms(peer, "deepseek-ai/DeepSeek-V3", "b200_sxm", "trtllm", 8, nextn, options, 1, 1024, 2048)
    return ask


def _case(row_id: int):
    corpus = pd.read_csv(CORPUS)
    return case_for(corpus[corpus.row_id == row_id].iloc[0])


def _step_ms(handle_cls, nextn: int, **kw) -> float:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        h = handle_cls.compile("deepseek-ai/DeepSeek-V3", "b200_sxm", "trtllm", backend_version=None, tp_size=8,
                               nextn=nextn, moe_quant_mode="nvfp4", **kw)
        return float(h.decode_step_latency(1, 1024, 2048))


def test_mtp_speedup_is_published_acceptance_times_the_peers_step_ratio(step_ms):
    # corpus row 198: 8 x B200, TensorRT-LLM, DeepSeek-R1 with nvfp4 experts, batch 1, ISL/OSL 1k/2k, one MTP
    # token, published acceptance length 1.92 (trtllm-dsr1-b200-blog), measured speedup 1.78x
    case = _case(198)
    assert (case.raw["hardware"]["tp"], int(case.row.k), float(case.row.acceptance_length)) == (8, 1, 1.92)
    plain, spec = (step_ms(n, moe_tp_size=8, moe_ep_size=1) for n in (0, 1))
    assert spec > plain  # its step verifies two tokens and runs the MTP layer
    speedup = tp.peer_speedup(case)
    assert speedup == pytest.approx(1.92 * plain / spec, rel=1e-12)
    assert 1.0 < speedup < 1.92


def test_moe_rows_pass_the_expert_split_the_peer_requires(peer, step_ms):
    # without moe_tp x moe_ep = tp the peer refuses every MoE configuration (it answered nothing for the
    # DeepSeek plain row 197 before the split was passed)
    with pytest.raises(Exception, match="moe_tp_size"):
        _step_ms(peer, 0)
    assert tp.peer_tpot_ms(_case(197)) == pytest.approx(step_ms(0, moe_tp_size=8, moe_ep_size=1), rel=1e-12)


def test_rows_the_peer_cannot_express_get_no_estimate(peer):
    assert tp.peer_speedup(_case(36)) is None  # an EAGLE head (Llama-3.1-8B, SGLang): no draft-head step model
    assert tp.peer_speedup(_case(203)) is None  # MTP without a published acceptance length
    assert tp.peer_speedup(_case(197)) is None and tp.peer_tpot_ms(_case(198)) is None  # kinds kept apart

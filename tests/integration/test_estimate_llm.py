"""The LLM's CPU memory plan against the real server's resident memory: tritonserver, the
Python-backend stub and vLLM's engine-core and worker processes, summed. Measured on the session's
shared LLM server (tests/conftest.py's ``llm_triton``), whose engine settings are not the zoo's
fitted point, after a full batch of its streams; the baseline is an empty server's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from builder.estimate.llm import llm_rows
from builder.estimate.rss import full_batch, tree_rss
from builder.llm.memory import ModelSizes
from builder.server import TritonServer
from builder.spec import load_spec
from builder.spec.llm import LLMDType
from tests.integration.fixtures.llm_repo import MODEL, SHARED_ENGINE, checkpoint

ROOT = Path(__file__).parents[2]
SETTLE_S = 2.0
pytestmark = pytest.mark.integration


def test_llm_cpu_plan_within_20_percent_of_measured_rss(llm_triton: TritonServer, tmp_path: Path) -> None:
    zoo = next(m for m in load_spec(ROOT / "models.yaml").llms if m.name == MODEL)
    llm = zoo.model_copy(
        update={
            "dtype": LLMDType(SHARED_ENGINE.dtype),
            "max_model_len": SHARED_ENGINE.max_model_len,
            "max_num_seqs": SHARED_ENGINE.max_num_seqs,
            "kv_cache_space_gib": SHARED_ENGINE.kv_cache_space_gib,
        }
    )
    (row,) = llm_rows(llm, ModelSizes.from_checkpoint(checkpoint()))
    full_batch(llm_triton.grpc_url, MODEL, llm.max_num_seqs)
    time.sleep(SETTLE_S)
    assert llm_triton.pid is not None
    server, stubs = tree_rss(llm_triton.pid)
    (tmp_path / "repo").mkdir()
    with TritonServer(tmp_path / "repo", model_control="explicit") as empty:
        assert empty.pid is not None
        time.sleep(SETTLE_S)
        baseline = sum(tree_rss(empty.pid))
    total = server + stubs
    assert stubs > row.weights + row.kv_space  # stub + engine processes counted
    assert total > baseline
    error = (row.total - total) / total
    assert abs(error) < 0.20, f"plan {row.total / 2**20:.0f} MiB vs measured {total / 2**20:.0f} MiB"

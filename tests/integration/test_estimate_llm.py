"""The LLM's CPU memory plan against the real server's resident memory: tritonserver, the
Python-backend stub and vLLM's engine-core and worker processes, summed (about 2 minutes: the
engine takes a minute to start here; the checkpoint comes from the test stage cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.estimate.llm import checkpoint_sizes, llm_rows
from builder.estimate.rss import measure_llms
from builder.llm.serving import EngineArgs, ServingSettings, write_local_model
from builder.spec import load_spec
from tests.integration.fixtures.llm_repo import MODEL, checkpoint

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.integration


def test_llm_cpu_plan_within_20_percent_of_measured_rss(tmp_path: Path) -> None:
    zoo = next(m for m in load_spec(ROOT / "models.yaml").llms if m.name == MODEL)
    llm = zoo.model_copy(update={"kv_cache_space_gib": 0.5, "max_num_seqs": 4})  # not the fitted point
    engine = EngineArgs(model="checkpoint", dtype=llm.dtype.value, max_model_len=llm.max_model_len,
                        max_num_seqs=llm.max_num_seqs, kv_cache_space_gib=llm.kv_cache_space_gib)  # fmt: skip
    version = write_local_model(tmp_path / MODEL, engine, ServingSettings(max_waiting=4))
    (version / "checkpoint").symlink_to(checkpoint())
    (row,) = llm_rows(llm, checkpoint_sizes(tmp_path, llm))
    baseline, (m,) = measure_llms(tmp_path, {MODEL: llm.max_num_seqs})
    assert m.model == MODEL and m.stubs > row.weights + row.kv_space  # stub + engine processes counted
    assert m.total > baseline
    error = (row.total - m.total) / m.total
    assert abs(error) < 0.20, f"plan {row.total / 2**20:.0f} MiB vs measured {m.total / 2**20:.0f} MiB"

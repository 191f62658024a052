"""bench.llm_variants: the sides it serves, their configs, its arguments and its arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from bench.llm_variants import VLLM, Side, parse, summary, table, write_official_model, write_repo
from builder.llm.interface import BACKEND_INPUTS, BACKEND_OUTPUTS
from builder.llm.serving import MODEL_SOURCE, EngineArgs


def _backend(root: Path) -> Path:
    src = root / "src"
    (src / "utils").mkdir(parents=True)
    (src / "model.py").write_text("class TritonPythonModel: ...\n")
    (src / "utils" / "metrics.py").write_text("")
    return src


def test_the_official_backend_is_served_with_its_own_interface(tmp_path: Path) -> None:
    write_official_model(tmp_path / "official", _backend(tmp_path), EngineArgs(model=str(tmp_path)))
    cfg = text_format.Parse((tmp_path / "official" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert cfg.backend == "python" and cfg.max_batch_size == 0 and cfg.model_transaction_policy.decoupled
    assert [i.name for i in cfg.input] == [t.name for t in BACKEND_INPUTS]
    assert [o.name for o in cfg.output] == [t.name for t in BACKEND_OUTPUTS]
    version = tmp_path / "official" / "1"
    assert (version / "vllm_backend_model.py").read_text().startswith("class TritonPythonModel")
    assert "C.UTF-8" in (version / "model.py").read_text() and (version / "utils" / "metrics.py").is_file()
    assert (version / "model.json").is_file()


def test_a_variant_is_the_model_with_its_patch_and_a_patch_that_does_not_apply_stops_the_run(
    tmp_path: Path,
) -> None:
    source = MODEL_SOURCE.read_text().splitlines(keepends=True)
    line = next(i for i, text in enumerate(source) if text.startswith("WATCH_PERIOD = "))
    patch = tmp_path / "watch.patch"
    patch.write_text(f"--- a/model.py\n+++ b/model.py\n@@ -{line + 1} +{line + 1} @@\n-{source[line]}"
                     "+WATCH_PERIOD = 0.5\n")  # fmt: skip
    sides = write_repo(tmp_path / "repo", tmp_path, None, {"watch": patch})
    assert [s.name for s in sides] == ["smollm2", "watch", VLLM]
    assert "WATCH_PERIOD = 0.5\n" in (tmp_path / "repo" / "watch" / "1" / "model.py").read_text()
    patch.write_text(patch.read_text().replace("-WATCH_PERIOD", "-NO_SUCH_LINE"))
    with pytest.raises(SystemExit, match="does not apply"):
        write_repo(tmp_path / "repo", tmp_path, None, {"watch": patch})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--variant", "nameonly"], "write NAME=PATCH"),
        (["--variant", "official=x.patch"], "write NAME=PATCH"),
        (["--variant", "v=/no/such.patch"], "no such patch file"),
        (["--backend", "/no/such/src"], "needs model.py and utils/"),
        (["--rounds", "0"], "at least 1"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_each_side_is_compared_to_vllm_by_the_sums_of_its_rounds() -> None:
    sides = [Side("smollm2", "model"), Side("official", "backend"), Side(VLLM, "server")]
    result = summary(sides, {"smollm2": [300, 330], "official": [310, 310], VLLM: [300, 300]})
    assert result["smollm2"]["vs_vllm_c16"] == 1.05 and result["smollm2"]["round_ratios"] == [1.0, 1.1]
    assert result["official"]["vs_vllm_c16"] == pytest.approx(1.033)
    assert "| smollm2 | 300, 330 | 1.050x | 1.00-1.10 |" in table(result)

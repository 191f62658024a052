"""A bad LoRA adapter stops `tritonforge build` before any stage runs: exit status 2, one line
naming file, model and field, and no repository written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builder.cli import main

TOLERANCE = {"min_agreement": 0.5, "max_logprob_gap": 1.0}
TOLERANCES = {"bfloat16": TOLERANCE, "float16": TOLERANCE}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: None, "not found"),
        (lambda d: d.mkdir(parents=True), "is not a PEFT LoRA adapter folder (no adapter_config.json)"),
    ],
)
def test_a_bad_adapter_exits_2_before_any_stage(
    tiny_project: Path, capsys: pytest.CaptureFixture[str], make: object, message: str
) -> None:
    (tiny_project / "ckpt").mkdir()
    (tiny_project / "calibration").mkdir(exist_ok=True)
    (tiny_project / "calibration" / "p.json").write_text("[]")
    make(tiny_project / "loras" / "sea")  # type: ignore[operator]
    spec = yaml.safe_load((tiny_project / "models.yaml").read_text())
    spec["llms"] = [{
        "name": "tiny_llm", "source": "ckpt", "dtype": "bfloat16", "gpu": {"dtype": "float16"},
        "evaluation": {"prompts": "calibration/p.json", "tolerances": TOLERANCES},
        "lora": {"adapters": {"sea": "loras/sea"}},
    }]  # fmt: skip
    (tiny_project / "models.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    repo = tiny_project / "model_repository"
    argv = ["build", "--spec", str(tiny_project / "models.yaml"), "--repo", str(repo), "--target", "local"]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "models.yaml: model 'tiny_llm': lora.adapters.sea: " in line and message in line, line
    assert not repo.exists() and not list(tiny_project.glob("model_repository.staging-*"))

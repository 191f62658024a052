"""plan_engines end to end: real build subprocesses running the TensorRT double,
real verification against ONNX Runtime outputs, real metadata on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from engine_support import TrtDouble, eval_inputs, fixed_model, tiny_model, write_onnx

from builder.engines import metadata
from builder.engines.detect import TensorRTAvailability
from builder.engines.metadata import fingerprint, read_metadata
from builder.engines.plan import EngineResult, Evaluation, Status, _Job, engine_options, plan_engines
from builder.engines.profiles import ProfileShapes
from builder.engines.request import BuildRequest, make_request
from builder.errors import StageDefect
from builder.spec import ModelSpec, Precision
from builder.spec.engine import EngineOptions
from builder.stages.runtimes import run_onnx
from tests.builder.code_edits import CodeEdits


def _evaluation(variants: dict[Precision, Path], inputs: dict[str, np.ndarray] | None = None) -> Evaluation:
    inputs = inputs or eval_inputs()
    return Evaluation(inputs, run_onnx(variants[Precision.FP32], inputs, batch_size=4))


def eval_inputs_shaped(*dims: int, samples: int = 20) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(1).standard_normal((samples, *dims)).astype(np.float32)}


def _plan(tmp_path, variants, a10, precisions, *, model=None, table=None, evaluation=None, **kw):
    """:func:`plan_engines` of ``model`` (default :func:`tiny_model`) into ``tmp_path/engines``,
    verified against the FP32 ONNX's outputs on ``evaluation`` (default :func:`_evaluation`)."""
    return plan_engines(
        tiny_model() if model is None else model,
        variants,
        table,
        tmp_path / "engines",
        tmp_path / "cache",
        evaluation=_evaluation(variants) if evaluation is None else evaluation,
        precisions=precisions,
        availability=a10,
        **kw,
    )


def test_a_tensorrt_crash_fails_one_plan_with_a_clear_message(
    trt10, tmp_path, variants, a10, monkeypatch
) -> None:
    old = tmp_path / "engines" / "fp16" / "model.plan"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"an old plan that must not be served")
    monkeypatch.setenv("TRT_DOUBLE_CRASH", "1")
    (result,) = _plan(tmp_path, variants, a10, [Precision.FP16])
    assert result.status is Status.FAILED and result.plan is None
    assert "TensorRT crashed the build process (SIGSEGV)" in result.message
    assert not old.exists()
    repro = old.with_name("model.plan.repro.sh")
    assert f"--onnx={variants[Precision.FP32]}" in repro.read_text() and "--fp16" in repro.read_text()
    assert str(repro) in result.message and old.with_name("model.plan.log").is_file()
    assert trt10.named("build_serialized_network") == [[2]]  # it got as far as building, with 2 profiles


def test_an_unexpected_exception_in_the_worker_is_a_defect_with_its_traceback(
    trt10, tmp_path, variants, a10, monkeypatch
) -> None:
    """A request the worker cannot read (a planted defect of the builder) fails the build (exit
    status 1), its traceback in the plan's log, instead of failing one plan as TensorRT's doing."""
    monkeypatch.setattr(BuildRequest, "to_json", lambda self: '{"onnx": "x.onnx"}')
    with pytest.raises(StageDefect) as info:
        _plan(tmp_path, variants, a10, [Precision.FP16])
    log = tmp_path / "engines" / "fp16" / "model.plan.log"
    assert (info.value.model, info.value.stage, info.value.log) == ("tiny", "engine-fp16", log)
    assert info.value.summary == "KeyError: 'profiles'" and "not of the model" in str(info.value)
    assert "Traceback (most recent call last)" in log.read_text() and "from_json" in log.read_text()


def test_a_parser_error_in_the_worker_names_the_node(trt10, tmp_path, variants, a10, monkeypatch) -> None:
    monkeypatch.setenv("TRT_DOUBLE_PARSE_ERROR", "relu0")
    (result,) = _plan(tmp_path, variants, a10, [Precision.INT8])
    assert result.status is Status.FAILED
    assert "TensorRT's ONNX parser rejected int8.onnx: node 'relu0' (Conv)" in result.message


def test_built_plans_are_run_verified_and_kept(trt10: TrtDouble, tmp_path, variants, a10) -> None:
    results = _plan(tmp_path, variants, a10, [Precision.FP32, Precision.FP16, Precision.INT8])
    note = " (Triton serves no evaluation batch with profiles [1]: not run)"  # 8x8 images: profile 0 only
    assert [(r.precision, r.status, r.message) for r in results] == [
        (p, Status.BUILT, "built and verified" + note)
        for p in (Precision.FP32, Precision.FP16, Precision.INT8)
    ]
    for r in results:
        assert r.plan is not None and r.plan.read_bytes().startswith(b"PLAN-DOUBLE")
        meta = read_metadata(r.plan)
        assert meta is not None and meta.verification["logits"]["min_cosine"] == pytest.approx(1.0)
        assert not (r.plan.parent / ".staging").exists()
    # each plan ran in its own worker, on the 6 evaluation samples at each profile's opt batch
    # (4, 8) and the max (16): 4 + 2, 6 and 6 samples
    batches = [e[1]["input"][0] for e in trt10.named("infer")]
    assert {str(e[0]) for e in trt10.named("infer")} == {"0"}
    assert batches == 3 * [4, 2, 6, 6]
    for r in results:
        meta = read_metadata(r.plan)
        assert meta is not None and meta.ms_per_sample is not None and meta.ms_per_sample > 0


def test_a_plan_that_could_not_be_run_is_never_kept(trt10, tmp_path, variants, a10) -> None:
    # 20x20 images fit neither profile (4-16 and 32-64): TensorRT refuses the shape at run time.
    evaluation = _evaluation(variants, eval_inputs_shaped(3, 20, 20))
    (result,) = _plan(tmp_path, variants, a10, [Precision.FP32], evaluation=evaluation)
    assert result.status is Status.FAILED
    assert (
        "the evaluation set cannot run on this plan: input shapes {'input': (4, 3, 20, 20)} fit no"
        in result.message
    )
    plan = tmp_path / "engines" / "fp32" / "model.plan"
    assert not plan.exists() and read_metadata(plan) is None
    assert not (plan.parent / ".staging").exists()


def test_each_batch_runs_under_the_profile_triton_would_choose(
    trt10: TrtDouble, tmp_path, variants, a10
) -> None:
    # 8x8 images fit profile 0, 40x40 only profile 1: before, every batch ran under profile 0
    small, large = eval_inputs_shaped(3, 8, 8, samples=16), eval_inputs_shaped(3, 40, 40, samples=16)
    for name, data in (("small", small), ("large", large)):
        (result,) = plan_engines(
            tiny_model(),
            variants,
            None,
            tmp_path / name,
            tmp_path / "cache",
            evaluation=_evaluation(variants, data),
            precisions=[Precision.FP32],
            availability=a10,
        )
        assert result.status is Status.BUILT, result.message
    assert trt10.named("TrtRunner") == [[0]] * 3 + [[1]] * 3  # run at batch 4, 8 and 16
    meta = read_metadata(tmp_path / "large" / "fp32" / "model.plan")
    assert meta is not None and meta.profiles_verified == [1]


def test_the_gpu_config_lets_triton_select_every_profile() -> None:
    from builder.targets import get

    def profiles(model: ModelSpec, target: str) -> list[list[str]]:
        cfg = get(target).core_config(model, model.name, Precision.FP16)
        return [list(g.profile) for g in cfg.instance_group]

    assert profiles(tiny_model(), "gpu") == [["0", "1"]]
    assert profiles(tiny_model(profiles=tiny_model().model_dump()["profiles"][:1]), "gpu") == [[]]
    assert profiles(tiny_model(), "cpu") == [[]]


def test_a_plan_whose_outputs_differ_fails_verification_and_is_dropped(
    trt10, tmp_path, variants, a10
) -> None:
    inputs = eval_inputs()
    wrong = {"logits": -run_onnx(variants[Precision.FP32], inputs, batch_size=4)["logits"]}
    (result,) = _plan(tmp_path, variants, a10, [Precision.FP16], evaluation=Evaluation(inputs, wrong))
    assert result.status is Status.FAILED and "the plan failed verification" in result.message
    assert "min_cosine" in result.message and not (tmp_path / "engines" / "fp16" / "model.plan").exists()


def _calibrator_plan(tmp_path, variants, a10, table, **kw):
    """The INT8 plan of :func:`tiny_model` in calibrator mode, from ``table``."""
    model = tiny_model(engine={"int8_mode": "calibrator"})
    return _plan(tmp_path, variants, a10, [Precision.INT8], model=model, table=table, **kw)


def test_a_calibrator_plan_reads_the_table_under_this_tensorrts_header(
    trt10: TrtDouble, tmp_path, variants, a10, calibration_table
) -> None:
    (result,) = _calibrator_plan(tmp_path, variants, a10, calibration_table)
    assert result.status is Status.BUILT, result.message
    headed = tmp_path / "engines" / "int8" / "calibration.cache"
    assert headed.read_text().splitlines()[0] == "TRT-101300-EntropyCalibration2"
    assert f"--calib={headed}" in (tmp_path / "engines" / "int8" / "model.plan.repro.sh").read_text()
    assert trt10.named("calibration_cache_rejected") == []


def test_a_calibrator_plan_of_fixed_shapes_without_batching_is_built_and_verified(
    trt10: TrtDouble, tmp_path, a10, calibration_table
) -> None:
    fp32 = write_onnx(tmp_path / "fixed.onnx", "fp32", (3, 8, 8))  # the fixed model's own shapes
    inputs = eval_inputs_shaped(3, 8, 8, samples=4)
    evaluation = Evaluation(inputs, run_onnx(fp32, inputs, batch_size=0))
    (result,) = _plan(
        tmp_path,
        {Precision.FP32: fp32},
        a10,
        [Precision.INT8],
        model=fixed_model(),
        table=calibration_table,
        evaluation=evaluation,
    )
    assert (result.status, result.message) == (Status.BUILT, "built and verified"), result.message
    assert [e[1] for e in trt10.named("infer")] == 4 * [{"input": [3, 8, 8]}]  # one sample at a time


def test_a_calibrator_plan_is_fresh_on_the_next_start_though_tensorrt_rewrote_the_cache(
    trt10: TrtDouble, tmp_path, variants, a10, calibration_table
) -> None:
    def build() -> EngineResult:
        # tritonforge engines --if-stale
        (result,) = _calibrator_plan(tmp_path, variants, a10, calibration_table, if_stale=True)
        return result

    assert build().status is Status.BUILT
    again = build()
    assert (again.status, again.message) == (Status.FRESH, "up to date")
    (written,) = trt10.named("write_calibration_cache")
    headed = tmp_path / "engines" / "int8" / "calibration.cache"
    assert written[0] != headed.read_text()  # the calibrator's copy was rewritten, not the table


def test_fresh_plans_are_kept_and_stale_ones_rebuilt(trt10: TrtDouble, tmp_path, variants, a10) -> None:
    job = _job(tmp_path, variants, a10)
    plan = tmp_path / "engines" / "fp16" / "model.plan"
    req = _request(job, Precision.FP16, plan)
    _keep_verified(job, Precision.FP16, req, plan, tmp_path)
    (fresh,) = _plan(tmp_path, variants, a10, [Precision.FP16], if_stale=True)
    assert (fresh.status, fresh.plan) == (Status.FRESH, plan)
    assert trt10.events() == []  # no build process was started
    newer = TensorRTAvailability(True, "", "10.14.1.48", a10.gpu)
    (rebuilt,) = _plan(tmp_path, variants, newer, [Precision.FP16], if_stale=True)
    assert rebuilt.status is Status.BUILT and rebuilt.plan == plan  # rebuilt, run and verified
    assert trt10.named("Builder") == [[]]


def test_editing_the_engine_code_or_a_new_polygraphy_rebuilds_the_plan_and_other_code_does_not(
    trt10: TrtDouble, tmp_path, variants, a10, monkeypatch
) -> None:
    def status() -> Status:
        (result,) = _plan(tmp_path, variants, a10, [Precision.FP16], if_stale=True)
        return result.status

    with CodeEdits(monkeypatch) as edits:
        assert status() is Status.BUILT
        edits.comment("builder/configs.py")
        assert status() is Status.FRESH
        edits.comment("builder/engines/trt_loader.py")
        assert status() is Status.BUILT
        assert status() is Status.FRESH
        real = metadata.tool_version
        monkeypatch.setattr(metadata, "tool_version", lambda t: "99.0" if t == "polygraphy" else real(t))
        assert status() is Status.BUILT


def test_a_fresh_plan_is_verified_again_when_its_tolerance_changes(
    trt10: TrtDouble, tmp_path, variants, a10
) -> None:
    (first,) = _plan(tmp_path, variants, a10, [Precision.FP16])
    assert first.status is Status.BUILT
    (again,) = _plan(tmp_path, variants, a10, [Precision.FP16], if_stale=True)
    assert again.status is Status.FRESH
    stricter = tiny_model(
        tolerances={
            "fp32": {"min_cosine": 0.9999},
            "fp16": {"min_cosine": 0.99999},
            "int8": {"mean_cosine": 0.99},
        }
    )
    (checked,) = _plan(tmp_path, variants, a10, [Precision.FP16], model=stricter, if_stale=True)
    assert checked.status is Status.BUILT  # run and verified again under the new tolerance
    assert len(trt10.named("Builder")) == 2


def test_verification_uses_the_cpu_tolerances_and_metadata_records_it(tmp_path, variants, a10) -> None:
    job = _job(tmp_path, variants, a10)
    plan = tmp_path / "engines" / "fp32" / "model.plan"
    req = _request(job, Precision.FP32, plan)
    outputs = tmp_path / "outputs.npz"
    np.savez(outputs, **job.evaluation.reference)
    assert job._verify(Precision.FP32, outputs)[0] == []
    noisy = {
        k: v + np.random.default_rng(1).normal(0, 1, v.shape) for k, v in job.evaluation.reference.items()
    }
    np.savez(outputs, **noisy)
    failures, _ = job._verify(Precision.FP32, outputs)
    assert failures and "min_cosine" in " ".join(failures)
    result = _keep_verified(job, Precision.FP32, req, plan, tmp_path)
    meta = read_metadata(plan)
    assert result.status is Status.BUILT and meta is not None
    assert (meta.tensorrt_version, meta.gpu_name, meta.compute_capability) == (
        "10.13.0.35",
        "NVIDIA A10",
        "8.6",
    )
    assert meta.onnx_sha256 == fingerprint(req).onnx_sha256
    assert meta.verification["logits"]["min_cosine"] == pytest.approx(1.0)


def test_without_tensorrt_every_plan_is_skipped(tmp_path, variants) -> None:
    none = TensorRTAvailability(False, "TensorRT is not installed")
    results = _plan(tmp_path, variants, none, None)
    assert [(r.precision, r.status, r.message) for r in results] == [
        (p, Status.SKIPPED, "TensorRT is not installed")
        for p in (Precision.FP32, Precision.FP16, Precision.INT8)
    ]


def test_engine_options_errors_name_the_field() -> None:
    from pydantic import ValidationError

    from builder.errors import SpecError

    try:
        model = tiny_model(engine={"optimization_level": 9})
    except ValidationError as exc:  # spec.py types `engine` as EngineOptions: caught at load
        assert exc.errors()[0]["loc"] == ("engine", "optimization_level")
    else:
        with pytest.raises(SpecError, match=r"engine\.optimization_level"):
            engine_options(model)
    assert engine_options(tiny_model(engine={})) == EngineOptions()


def _job(tmp_path: Path, variants: dict[Precision, Path], a10: TensorRTAvailability) -> _Job:
    model = tiny_model()
    return _Job(
        model,
        engine_options(model),
        variants,
        None,
        a10,
        tmp_path / "engines",
        tmp_path / "cache",
        _evaluation(variants),
    )


def _request(job: _Job, precision: Precision, plan: Path):
    return make_request(
        job.model,
        job.options,
        precision,
        job.variants,
        None,
        "10.13.0.35",
        plan=plan,
        timing_cache=job.cache_dir / "x",
    )


def _keep_verified(job, precision, req, plan, tmp_path):
    """What the parent does after a worker built and ran a plan that passed verification."""
    staging = plan.parent / ".staging"
    staging.mkdir(parents=True, exist_ok=True)
    built = staging / plan.name
    built.write_bytes(b"PLAN")
    return job._keep(precision, req, plan, built, {"logits": {"min_cosine": 1.0}}, staging)


def _batch_profiles() -> list[dict]:
    """Two profiles over the same images, for batch 2 and batch 16: only Triton's nearest-opt
    rule sends a request to profile 1."""
    same = {"input": {"min": [3, 4, 4], "opt": [3, 8, 8], "max": [3, 16, 16]}}
    return [{"opt_batch": 2, "shapes": same}, {"opt_batch": 16, "shapes": same}]


def test_every_profile_is_verified_and_run_as_triton_would_choose_it(
    trt10: TrtDouble, tmp_path, variants, a10
) -> None:
    evaluation = _evaluation(variants, eval_inputs_shaped(3, 8, 8, samples=20))
    model = tiny_model(profiles=_batch_profiles())
    (result,) = _plan(tmp_path, variants, a10, [Precision.FP32], model=model, evaluation=evaluation)
    assert result.status is Status.BUILT, result.message
    assert result.message == "built and verified"
    # at batch 2 (profile 0's opt) and 16 (profile 1's opt and the max): the 4 left over at 16
    # go to profile 0, whose opt (2) is nearer
    runs = [(p, shapes["input"][0]) for p, shapes in trt10.named("infer")]
    assert sorted(set(runs)) == [(0, 2), (0, 4), (1, 16)]
    meta = read_metadata(result.plan)
    assert meta is not None and meta.profiles_verified == [0, 1]
    assert sorted(meta.verification["batches"]) == ["16", "2"]


def _double_plan(variants: dict[Precision, Path], profiles: list[ProfileShapes]) -> bytes:
    """A plan of the TensorRT double, as its build would write it, of the FP32 tiny model."""
    import json

    import tensorrt as trt

    plan = {
        "version": trt.__version__,
        "onnx": str(variants[Precision.FP32]),
        "inputs": {"input": [-1, 3, -1, -1]},
        "profiles": [{r.name: [list(r.min), list(r.opt), list(r.max)] for r in p} for p in profiles],
    }
    return trt.IHostMemory(trt.PLAN_MAGIC + json.dumps(plan).encode())


def test_timing_a_profile_the_plan_lacks_says_so(trt10, variants) -> None:
    import trt_double_runner

    from builder.engines.profiles import profile_shapes
    from builder.engines.trt_runner import time_profiles

    trt_double_runner.install()  # Polygraphy's device arrays and stream, on host memory
    two = profile_shapes(tiny_model())
    plan = _double_plan(variants, two[:1])
    # TensorRT's set_optimization_profile_async raises RuntimeError, never returns False
    with pytest.raises(RuntimeError, match=r"^the plan has no optimization profile 1$"):
        time_profiles(plan, eval_inputs(), 16, two, rounds=1, launches=1)


def test_the_double_refuses_a_profile_triton_would_not_choose(trt10, tmp_path, variants) -> None:
    import trt_double_runner

    from builder.engines.profiles import profile_shapes

    trt_double_runner.install()  # Polygraphy's runner, on host memory, checking Triton's choice
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    plan = _double_plan(variants, profile_shapes(tiny_model(profiles=_batch_profiles())))
    with TrtRunner(EngineFromBytes(plan), optimization_profile=0) as runner:
        with pytest.raises(RuntimeError, match="Triton serves them with profile 1"):
            runner.infer({"input": np.zeros((16, 3, 8, 8), np.float32)})
        assert list(runner.infer({"input": np.zeros((2, 3, 8, 8), np.float32)})) == ["logits"]


def test_a_gpu_missing_from_cc_model_filenames_fails_its_plans_with_the_reason(
    trt10: TrtDouble, tmp_path, variants, a10
) -> None:
    # Triton looks up the GPU's compute capability, else default_model_filename (model.plan):
    # a model.sm86.plan nothing maps would never load.
    model = tiny_model(engine={"cc_model_filenames": ["8.0", "8.9"]})
    (result,) = _plan(tmp_path, variants, a10, [Precision.FP16], model=model)
    assert result.status is Status.FAILED and result.plan is None
    assert result.message == (
        "engine.cc_model_filenames lists 8.0, 8.9 but this GPU (NVIDIA A10) is 8.6: Triton would "
        "look for model.plan and not load the model; add '8.6' to the list"
    )
    assert trt10.events() == []


def test_each_profile_is_timed_at_its_opt_shape_with_the_inputs_on_the_device(
    trt10: TrtDouble, tmp_path, variants, a10
) -> None:
    (result,) = _plan(tmp_path, variants, a10, [Precision.FP16])
    assert result.status is Status.BUILT, result.message
    # profile 0 at [4, 3, 8, 8] and profile 1 at [8, 3, 32, 32] (no evaluation sample has that
    # shape: zeros), each 3 warm-up launches and 5 rounds of 20, none through Polygraphy's infer()
    # (after verification, where Polygraphy's runner executed once per batch)
    verified = [(p, shapes["input"]) for p, shapes in trt10.named("infer")]
    runs = [(p, shapes["input"]) for p, shapes in trt10.named("execute_async_v3")]
    assert runs[: len(verified)] == verified
    assert runs[len(verified) :] == [(0, [4, 3, 8, 8])] * 103 + [(1, [8, 3, 32, 32])] * 103
    # each round between two CUDA events recorded on the stream
    first = len(verified) + 3
    assert [e for e in trt10.events() if e[0] in ("cudaEventRecord", "execute_async_v3")][
        first : first + 22
    ] == (
        [["cudaEventRecord", 1]]
        + [["execute_async_v3", 0, {"input": [4, 3, 8, 8]}]] * 20
        + [["cudaEventRecord", 2]]
    )
    meta = read_metadata(result.plan)
    assert meta is not None and meta.ms_per_sample is not None
    by_profile = meta.verification["timing"]["by_profile"]
    assert len(by_profile) == 2 and meta.ms_per_sample == pytest.approx(sum(by_profile) / 2)


def test_with_a_shared_engine_cache_plans_and_timing_cache_go_to_its_gpu_and_tensorrt_folder(
    trt10: TrtDouble, tmp_path, variants, a10, monkeypatch
) -> None:
    from builder.engines.build import EngineInput, build_all

    evaluation = _evaluation(variants)
    ref = tmp_path / "reference"
    ref.mkdir()
    np.savez(ref / "inputs.npz", **evaluation.inputs)
    np.savez(ref / "reference.npz", **evaluation.reference)
    shared = tmp_path / "volume"
    monkeypatch.setenv("TRITONFORGE_ENGINE_CACHE", str(shared))
    model = EngineInput(tiny_model(), variants, [Precision.FP16], Precision.FP16, None, ref)
    engines = build_all([model], tmp_path / "cache", lambda _: None, require=True, availability=a10)
    (result,) = engines.results["tiny"]
    folder = shared / "nvidia-a10-sm86-trt10.13.0.35"
    assert result.plan == folder / "tiny" / "engines" / "fp16" / "model.plan"
    assert (folder / "tensorrt" / "timing-trt10.13.0.35-sm86.cache").is_file()
    assert not (tmp_path / "cache" / "tiny").exists()


def test_the_plan_built_is_the_file_triton_loads_on_this_gpu(
    trt10: TrtDouble, tmp_path, variants, a10
) -> None:
    from trt_double_runner import triton_model_file

    from builder.targets import get

    model = tiny_model(engine={"cc_model_filenames": ["8.6", "8.9"]})
    (result,) = _plan(tmp_path, variants, a10, [Precision.FP16], model=model)
    cfg = get("gpu").core_config(model, "tiny", Precision.FP16)
    files = dict(cfg.cc_model_filenames)
    assert result.plan is not None
    assert (
        result.plan.name == triton_model_file(files, cfg.default_model_filename, "8.6") == "model.sm86.plan"
    )
    # on a GPU the list lacks Triton would look for model.plan, which no build writes: such a
    # GPU fails its plans (test_a_gpu_missing_from_cc_model_filenames_fails_its_plans_with_the_reason)
    assert triton_model_file(files, cfg.default_model_filename, "8.0") == "model.plan"


def test_pods_sharing_the_engine_cache_build_one_at_a_time(
    trt10, tmp_path, variants, a10, monkeypatch
) -> None:
    # Two pods started together on one GPU model would share a plan's staging folder: the
    # second waits for the first's lock, then finds its plans fresh.
    import fcntl

    from builder.engines import build as build_module

    shared = tmp_path / "volume"
    monkeypatch.setenv("TRITONFORGE_ENGINE_CACHE", str(shared))
    held: list[bool] = []

    def probe(*args: object, **kwargs: object) -> list:
        with (shared / "nvidia-a10-sm86-trt10.13.0.35" / ".lock").open("a") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(True)
            else:
                held.append(False)
        return []

    monkeypatch.setattr(build_module, "plan_engines", probe)
    ref = tmp_path / "reference"
    ref.mkdir()
    evaluation = _evaluation(variants)
    np.savez(ref / "inputs.npz", **evaluation.inputs)
    np.savez(ref / "reference.npz", **evaluation.reference)
    model = build_module.EngineInput(tiny_model(), variants, [Precision.FP16], Precision.FP16, None, ref)
    build_module.build_all([model], tmp_path / "cache", lambda _: None, require=False, availability=a10)
    assert held == [True]


def _overlapping_profiles() -> list[dict]:
    """Two profiles over the same range that differ in the opt width only (8 against 48)."""
    wide = {"min": [3, 4, 4], "max": [3, 64, 64]}
    return [
        {"opt_batch": 4, "shapes": {"input": {**wide, "opt": [3, 8, 8]}}},
        {"opt_batch": 4, "shapes": {"input": {**wide, "opt": [3, 8, 48]}}},
    ]


def test_overlapping_profiles_are_verified_under_the_one_triton_chooses(
    trt10: TrtDouble, tmp_path, variants, a10
) -> None:
    # 8x48 images: profile 1's opt is their very shape, yet Triton's GetMostOptimizedProfile
    # (opt dim i against request dim i - 1) serves them with profile 0, so they are run there
    evaluation = _evaluation(variants, eval_inputs_shaped(3, 8, 48, samples=20))
    model = tiny_model(profiles=_overlapping_profiles())
    (result,) = _plan(tmp_path, variants, a10, [Precision.FP32], model=model, evaluation=evaluation)
    assert result.status is Status.BUILT, result.message
    assert (
        result.message == "built and verified (Triton serves no evaluation batch with profiles [1]: not run)"
    )
    assert {p for p, _ in trt10.named("infer")} == {0}
    meta = read_metadata(result.plan)
    assert meta is not None and meta.profiles_verified == [0]


def test_the_double_runs_overlapping_profiles_only_as_triton_chooses(trt10, variants) -> None:
    import trt_double_runner

    from builder.engines.profiles import profile_shapes

    trt_double_runner.install()  # Polygraphy's runner, on host memory, checking Triton's choice
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    plan = _double_plan(variants, profile_shapes(tiny_model(profiles=_overlapping_profiles())))
    with TrtRunner(EngineFromBytes(plan), optimization_profile=1) as runner:
        with pytest.raises(RuntimeError, match="Triton serves them with profile 0"):
            runner.infer({"input": np.zeros((4, 3, 8, 48), np.float32)})
        assert list(runner.infer({"input": np.zeros((4, 3, 48, 8), np.float32)})) == ["logits"]


def test_on_tensorrt_11_a_plan_is_built_run_and_timed_through_polygraphy(
    trt11: TrtDouble, tmp_path, variants, a10
) -> None:
    # TensorRT 11 has no FP16 flag: Polygraphy's CreateConfig is asked for none, and the FP16
    # variant is parsed strongly typed; its runner and the timing then run the plan.
    eleven = TensorRTAvailability(True, "test machine", "11.4.0.1", a10.gpu)
    (result,) = _plan(tmp_path, variants, eleven, [Precision.FP16])
    assert result.status is Status.BUILT, result.message
    assert trt11.named("create_network") == [[2]] and trt11.named("set_flag") == []
    assert trt11.named("parse_from_file") == [[str(variants[Precision.FP16])]]
    assert {p for p, _ in trt11.named("infer")} == {0}
    meta = read_metadata(result.plan)
    assert meta is not None and meta.tensorrt_version == "11.4.0.1" and meta.ms_per_sample is not None

"""Configs built from the spec: every field lands in the proto, and the text round-trips strictly."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import (
    DataType,
    ModelConfig,
    ModelInput,
    ModelInstanceGroup,
    ModelQueuePolicy,
)

from builder.configs import ensemble_config, read_config, write_config
from builder.server import TritonServer
from builder.spec import EnsembleSpec, ModelSpec, Precision, PythonModelSpec, Spec, load_spec
from builder.targets import TARGETS, get
from builder.targets.gpu import GpuTarget

Target = str

ROOT = Path(__file__).parents[2]
KIND_CPU = ModelInstanceGroup.Kind.Value("KIND_CPU")
KIND_GPU = ModelInstanceGroup.Kind.Value("KIND_GPU")


def full_model(**overrides: object) -> ModelSpec:
    """A model that sets every field a config reads, each to a non-default value."""
    raw: dict[str, object] = {
        "name": "seq",
        "source": "seq.onnx",
        "inputs": [
            {"name": "tokens", "dtype": "INT64", "dims": [-1]},
            {"name": "scale", "dtype": "FP32", "dims": [4], "optional": True},
        ],
        "outputs": [
            {"name": "logits", "dtype": "FP32", "dims": [10], "labels": "zoo/seq_labels.txt"},
            {"name": "hidden", "dtype": "FP16", "dims": [-1, 8]},
        ],
        "max_batch_size": 16,
        "batching": {
            "preferred_batch_sizes": [4, 16],
            "max_queue_delay_us": 250,
            # Triton allows preserve_ordering with one priority level only: see test below.
            "preserve_ordering": False,
            "queue": {
                "max_queue_size": 64,
                "default_timeout_us": 9000,
                "timeout_action": "delay",
                "allow_timeout_override": False,
            },
            "priority_levels": 2,
            "default_priority_level": 2,
            "priority_queues": {1: {"max_queue_size": 8, "timeout_action": "reject"}},
        },
        "instances": {"count": 3},
        "profiles": [
            {"opt_batch": 8, "shapes": {"tokens": {"min": [1], "opt": [32], "max": [128]}}},
            {"opt_batch": 2, "shapes": {"tokens": {"min": [1], "opt": [7], "max": [9]}}},
        ],
        "evaluation": {"data": "eval.npz"},
        "tolerances": {"fp32": {"min_cosine": 0.99}},
        "warmup": {"batch_sizes": [1, 8], "count": 3},
        "engine": {"cuda_graphs": True},
        "targets": {"local": {"queue_policy": True}},
    }
    raw.update(overrides)
    return ModelSpec.model_validate(raw)


def core_config(
    model: ModelSpec, target: str, *, variant: Precision, name: str | None = None, threads: int | None = None
) -> ModelConfig:
    """The target object's config for one variant (``threads`` sets the spec's serve.threads)."""
    if threads is not None:
        serve = {**model.serve.model_dump(), "threads": threads}
        model = ModelSpec.model_validate({**model.model_dump(), "serve": serve})
    return get(target).core_config(model, name or model.name, variant)


def fallback_config(model: ModelSpec) -> ModelConfig:
    return GpuTarget().fallback_config(model)


def python_config(pm: PythonModelSpec, target: str = "cpu") -> ModelConfig:
    return get(target).python_model(pm).config


def round_trip(cfg: ModelConfig, tmp_path: Path) -> ModelConfig:
    path = write_config(cfg, tmp_path / cfg.name)
    assert path == tmp_path / cfg.name / "config.pbtxt"
    back = read_config(path)
    assert back == cfg
    return back


@pytest.mark.parametrize("target", TARGETS)
def test_core_config_carries_every_spec_field(target: Target, tmp_path: Path) -> None:
    cfg = round_trip(core_config(full_model(), target, variant=Precision.FP32), tmp_path)
    assert cfg.name == "seq" and cfg.max_batch_size == 16
    assert [(i.name, list(i.dims), i.optional) for i in cfg.input] == [
        ("tokens", [-1], False),
        ("scale", [4], True),
    ]
    assert [i.data_type for i in cfg.input] == [DataType.Value("TYPE_INT64"), DataType.Value("TYPE_FP32")]
    assert [(o.name, list(o.dims), o.label_filename) for o in cfg.output] == [
        ("logits", [10], "seq_labels.txt"),
        ("hidden", [-1, 8], ""),
    ]
    assert cfg.output[1].data_type == DataType.Value("TYPE_FP16")

    db = cfg.dynamic_batching
    assert list(db.preferred_batch_size) == [4, 16]
    assert db.max_queue_delay_microseconds == 250 and not db.preserve_ordering
    assert db.priority_levels == 2 and db.default_priority_level == 2
    q = db.default_queue_policy
    assert (q.max_queue_size, q.default_timeout_microseconds, q.allow_timeout_override) == (64, 9000, False)
    assert q.timeout_action == ModelQueuePolicy.TimeoutAction.Value("DELAY")
    assert set(db.priority_queue_policy) == {1}
    p1 = db.priority_queue_policy[1]
    assert p1.max_queue_size == 8 and p1.timeout_action == ModelQueuePolicy.TimeoutAction.Value("REJECT")

    assert [(g.count, g.kind) for g in cfg.instance_group] == [(3, KIND_GPU if target == "gpu" else KIND_CPU)]

    assert [(w.name, w.batch_size, w.count) for w in cfg.model_warmup] == [
        ("warmup_batch_1", 1, 3),
        ("warmup_batch_8", 8, 3),
    ]
    for w in cfg.model_warmup:
        tokens, scale = w.inputs["tokens"], w.inputs["scale"]
        assert list(tokens.dims) == [32], "dynamic dims take the first profile's opt shape"
        assert tokens.zero_data and not tokens.random_data
        assert list(scale.dims) == [4] and scale.random_data


def test_preserve_ordering() -> None:
    model = full_model(batching={"preserve_ordering": True})
    assert core_config(model, "cpu", variant=Precision.FP32).dynamic_batching.preserve_ordering


def test_local_target_runs_the_python_onnx_runner(tmp_path: Path) -> None:
    cfg = round_trip(core_config(full_model(), "local", variant=Precision.INT8, threads=3), tmp_path)
    assert cfg.backend == "python" and not cfg.platform and not cfg.default_model_filename
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params == {"onnx_file": "model.onnx", "precision": "int8", "intra_op_threads": "3"}
    assert not cfg.HasField("optimization")


@pytest.mark.parametrize(("spinning", "written"), [(None, None), (True, "1"), (False, "0")])
def test_local_target_writes_allow_spinning_only_when_set(
    spinning: bool | None, written: str | None, tmp_path: Path
) -> None:
    model = full_model(targets={"local": {"spinning": spinning}})
    params = round_trip(core_config(model, "local", variant=Precision.FP32), tmp_path).parameters
    assert (params["allow_spinning"].string_value if "allow_spinning" in params else None) == written
    for target in ("cpu", "gpu"):  # Triton's own backends have no such setting
        cfg = core_config(model, target, variant=Precision.FP32)
        assert not any("spin" in key for key in cfg.parameters)


def test_cpu_target_is_onnxruntime(tmp_path: Path) -> None:
    cfg = round_trip(core_config(full_model(), "cpu", variant=Precision.FP32), tmp_path)
    assert cfg.platform == "onnxruntime_onnx" and not cfg.backend
    assert cfg.default_model_filename == "model.onnx"
    assert not cfg.HasField("optimization")
    threaded = core_config(full_model(), "cpu", variant=Precision.FP32, threads=2)
    assert threaded.parameters["intra_op_thread_count"].string_value == "2"


def fixed_model(**overrides: object) -> ModelSpec:
    """full_model with fixed tensor shapes: the batch size is all that varies."""
    fixed = {
        "inputs": [{"name": "tokens", "dtype": "INT64", "dims": [16]}],
        "outputs": [{"name": "logits", "dtype": "FP32", "dims": [10]}],
        "profiles": [{"opt_batch": 8}, {"opt_batch": 2}],
    }
    return full_model(**{**fixed, **overrides})


def test_gpu_target_is_tensorrt_with_cuda_graphs_only_when_asked(tmp_path: Path) -> None:
    cfg = round_trip(core_config(fixed_model(), "gpu", variant=Precision.FP16), tmp_path)
    assert cfg.platform == "tensorrt_plan" and cfg.default_model_filename == "model.plan"
    assert cfg.optimization.cuda.graphs
    assert not cfg.cc_model_filenames
    plain = core_config(fixed_model(engine={}), "gpu", variant=Precision.FP16)
    assert not plain.HasField("optimization")


def test_cuda_graphs_cover_every_batch_size_served(tmp_path: Path) -> None:
    # Without graph_spec Triton captures at the opt shape's exact batch sizes only; each graph
    # here serves the batch sizes from its lower bound up (padded), 1..16 in all.
    cfg = round_trip(core_config(fixed_model(), "gpu", variant=Precision.FP16), tmp_path)
    specs = [
        (g.batch_size, g.graph_lower_bound.batch_size, {k: list(v.dim) for k, v in g.input.items()})
        for g in cfg.optimization.cuda.graph_spec
    ]
    assert specs == [(2, 1, {"tokens": [16]}), (8, 3, {"tokens": [16]}), (16, 9, {"tokens": [16]})]
    assert all(dict(g.graph_lower_bound.input) == dict(g.input) for g in cfg.optimization.cuda.graph_spec)


def test_cuda_graphs_stay_off_where_the_shapes_vary(tmp_path: Path) -> None:
    # tokens [-1]: a graph captured at one sequence length serves no other
    cfg = round_trip(core_config(full_model(), "gpu", variant=Precision.FP16), tmp_path)
    assert not cfg.HasField("optimization")


def test_gpu_plans_per_compute_capability(tmp_path: Path) -> None:
    model = full_model(engine={"cc_model_filenames": ["8.6", "9.0"]})
    cfg = round_trip(core_config(model, "gpu", variant=Precision.INT8), tmp_path)
    assert dict(cfg.cc_model_filenames) == {"8.6": "model.sm86.plan", "9.0": "model.sm90.plan"}
    assert cfg.default_model_filename == "model.plan"
    assert not core_config(model, "cpu", variant=Precision.FP32).cc_model_filenames


def test_core_name_override_and_explicit_instance_kind() -> None:
    model = full_model(instances={"count": 2, "kind": "cpu"})
    cfg = core_config(model, "gpu", variant=Precision.FP32, name="seq_fp32")
    assert cfg.name == "seq_fp32"
    assert cfg.instance_group[0].kind == KIND_CPU


def test_fallback_is_onnxruntime_beside_the_plan(tmp_path: Path) -> None:
    cfg = round_trip(fallback_config(full_model()), tmp_path)
    assert cfg.name == "seq_onnx" and cfg.platform == "onnxruntime_onnx"
    assert cfg.default_model_filename == "model.onnx"
    assert cfg.instance_group[0].kind == KIND_GPU
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 16]
    assert not cfg.model_warmup


@pytest.mark.parametrize(
    "overrides",
    [
        {"batching": {"enabled": False}},
        {"max_batch_size": 0, "batching": {}, "warmup": None, "profiles": [
            {"shapes": {"tokens": {"min": [1], "opt": [32], "max": [128]}}}
        ]},
    ],
    ids=["disabled", "unbatched"],
)  # fmt: skip
def test_no_dynamic_batching_unless_enabled_and_batched(overrides: dict[str, object]) -> None:
    cfg = core_config(full_model(**overrides), "local", variant=Precision.FP32)
    assert not cfg.HasField("dynamic_batching")


def test_unbatched_warmup_uses_batch_size_one() -> None:
    profiles = [{"shapes": {"tokens": {"min": [1], "opt": [5], "max": [9]}}}]
    model = full_model(max_batch_size=0, batching={}, warmup={"batch_sizes": [1]}, profiles=profiles)
    cfg = core_config(model, "cpu", variant=Precision.FP32)
    assert cfg.max_batch_size == 0
    assert [w.batch_size for w in cfg.model_warmup] == [1]
    assert list(cfg.model_warmup[0].inputs["tokens"].dims) == [5]


def test_python_config(tmp_path: Path) -> None:
    pm = PythonModelSpec.model_validate(
        {
            "name": "pre",
            "path": "builder/python_models/image_preprocess",
            "inputs": [{"name": "IMAGE", "dtype": "STRING", "dims": [1]}],
            "outputs": [{"name": "PIXELS", "dtype": "FP32", "dims": [3, 224, 224]}],
            "max_batch_size": 4,
            "batching": {"enabled": True, "max_queue_delay_us": 100},
            "instances": {"count": 2},
            "parameters": {"mode": "fast", "size": 224, "ratio": 0.5, "strict": True},
        }
    )
    cfg = round_trip(python_config(pm), tmp_path)
    assert cfg.backend == "python" and cfg.max_batch_size == 4
    assert cfg.input[0].data_type == DataType.Value("TYPE_STRING")
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params == {"mode": "fast", "size": "224", "ratio": "0.5", "strict": "true"}
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
    assert [(g.count, g.kind) for g in cfg.instance_group] == [(2, KIND_CPU)]


def test_python_config_without_batching() -> None:
    pm = PythonModelSpec.model_validate(
        {
            "name": "post",
            "path": "x",
            "inputs": [{"name": "A", "dtype": "FP32", "dims": [2]}],
            "outputs": [{"name": "B", "dtype": "FP32", "dims": [2]}],
            "max_batch_size": 4,
        }
    )
    assert not python_config(pm).HasField("dynamic_batching")


def test_zoo_ensemble(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "models.yaml")
    ens = next(e for e in spec.ensembles if e.name == "resnet18_image")
    cfg = round_trip(ensemble_config(ens, spec), tmp_path)
    assert cfg.platform == "ensemble" and cfg.max_batch_size == 32
    assert cfg.output[0].label_filename == "resnet18_labels.txt"
    steps = [(s.model_name, s.model_version, dict(s.input_map), dict(s.output_map))
             for s in cfg.ensemble_scheduling.step]  # fmt: skip
    assert steps == [
        ("image_preprocess", -1, {"IMAGE": "IMAGE"}, {"PIXELS": "pixels"}),
        ("resnet18", -1, {"input": "pixels"}, {"logits": "LOGITS"}),
    ]


def test_ensemble_rejects_unknown_step_model() -> None:
    spec = load_spec(ROOT / "models.yaml")
    ens = EnsembleSpec.model_validate(
        {
            "name": "e",
            "inputs": [{"name": "X", "dtype": "FP32", "dims": [1]}],
            "outputs": [{"name": "Y", "dtype": "FP32", "dims": [1]}],
            "steps": [{"model": "nope", "inputs": {"X": "X"}, "outputs": {"Y": "Y"}}],
        }
    )
    with pytest.raises(ValueError, match="nope"):
        ensemble_config(ens, spec)


@pytest.mark.parametrize("target", TARGETS)
def test_whole_zoo_round_trips(target: Target, tmp_path: Path) -> None:
    spec = load_spec(ROOT / "models.yaml")
    for cfg in zoo_configs(spec, target):
        round_trip(cfg, tmp_path)


def test_read_config_is_strict(tmp_path: Path) -> None:
    path = write_config(core_config(full_model(), "cpu", variant=Precision.FP32), tmp_path / "m")
    text = path.read_text()
    path.write_text(text.replace("max_batch_size:", "max_batch_sise:"))
    with pytest.raises(text_format.ParseError, match="max_batch_sise"):
        read_config(path)
    path.write_text(text.replace("KIND_GPU", "KIND_TPU").replace("KIND_CPU", "KIND_TPU"))
    with pytest.raises(text_format.ParseError, match="KIND_TPU"):
        read_config(path)


def zoo_configs(spec: Spec, target: Target) -> list[ModelConfig]:
    configs = [core_config(m, target, variant=m.precisions[0]) for m in spec.models]
    if target == "gpu":
        configs += [fallback_config(m) for m in spec.models]
    configs += [python_config(pm) for pm in spec.python_models]
    configs += [ensemble_config(e, spec) for e in spec.ensembles]
    return configs


@pytest.mark.integration
@pytest.mark.parametrize(("target", "backend"), [("cpu", "onnxruntime"), ("gpu", "tensorrt")])
def test_real_server_accepts_container_configs(target: Target, backend: str, tmp_path: Path) -> None:
    """The pip server has only the Python backend, but validates every config before looking for one."""
    model = full_model()
    repo = tmp_path / "repo"
    write_config(core_config(model, target, variant=Precision.FP32), repo / model.name)
    (repo / model.name / "1").mkdir()
    (repo / model.name / "seq_labels.txt").write_text("\n".join(f"c{i}" for i in range(10)))
    log = tmp_path / "server.log"
    with pytest.raises(Exception, match="exited"):
        TritonServer(repo, log_path=log).start(timeout=60)
    text = log.read_text()
    assert f"unable to find backend library for backend '{backend}'" in text


@pytest.mark.integration
def test_real_server_rejects_an_inconsistent_config(tmp_path: Path) -> None:
    """Control for the test above: a config Triton finds wrong fails with Triton's own message."""
    cfg = core_config(full_model(), "cpu", variant=Precision.FP32)
    cfg.dynamic_batching.preferred_batch_size.append(99)
    repo = tmp_path / "repo"
    write_config(cfg, repo / cfg.name)
    (repo / cfg.name / "1").mkdir()
    log = tmp_path / "server.log"
    with pytest.raises(Exception, match="exited"):
        TritonServer(repo, log_path=log).start(timeout=60)
    text = log.read_text()
    assert "preferred size must be <= max batch size" in text
    assert "unable to find backend library" not in text


def test_local_target_omits_queue_policy_unless_asked() -> None:
    """tritonserver 2.51 (the local target) stalls requests whenever a queue policy is set."""
    model = full_model()
    plain = model.model_copy(update={"targets": None})
    local = core_config(plain, "local", variant=Precision.FP32).dynamic_batching
    assert not local.HasField("default_queue_policy") and local.priority_levels == 0
    assert list(local.preferred_batch_size) == [4, 16]
    container = core_config(plain, "cpu", variant=Precision.FP32).dynamic_batching
    assert container.default_queue_policy.max_queue_size == 64 and container.priority_levels == 2


def _params(cfg: ModelConfig) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def test_local_target_bounds_the_runner_where_triton_policy_is_left_out() -> None:
    """Where the queue policy is dropped on local, the onnx_runner gets the spec's bound instead."""
    model = full_model(
        batching={
            "queue": {"max_queue_size": 64, "default_timeout_us": 9000, "allow_timeout_override": False}
        },
        targets=None,
    )
    params = _params(core_config(model, "local", variant=Precision.FP32))
    assert params["max_queue_size"] == "64" and params["queue_timeout_us"] == "9000"
    assert params["allow_timeout_override"] == "false"
    assert "max_queue_size" not in _params(core_config(model, "cpu", variant=Precision.FP32))


def test_local_runner_bound_follows_the_spec() -> None:
    unbounded = core_config(full_model(batching={}, targets=None), "local", variant=Precision.FP32)
    assert "max_queue_size" not in _params(unbounded), "no bound in the spec: none in the runner"
    with_triton_policy = core_config(full_model(), "local", variant=Precision.FP32)  # queue_policy: true
    assert "max_queue_size" not in _params(with_triton_policy)
    delay = full_model(
        batching={"queue": {"max_queue_size": 8, "default_timeout_us": 5, "timeout_action": "delay"}},
        targets=None,
    )
    params = _params(core_config(delay, "local", variant=Precision.FP32))
    assert params["max_queue_size"] == "8" and params["queue_timeout_us"] == "0", (
        "DELAY refuses nothing on timeout"
    )


def test_image_layout_is_written_for_every_target() -> None:
    model = full_model(
        inputs=[{"name": "image", "dtype": "FP32", "dims": [3, 8, 8], "format": "NCHW"}],
        outputs=[{"name": "logits", "dtype": "FP32", "dims": [10]}],
        profiles=[],
        batching={},
    )
    for target in TARGETS:
        cfg = core_config(model, target, variant=Precision.FP32)
        assert cfg.input[0].format == ModelInput.Format.Value("FORMAT_NCHW"), target
    assert fallback_config(model).input[0].format == ModelInput.Format.Value("FORMAT_NCHW")
    plain = core_config(full_model(), "local", variant=Precision.FP32)
    assert all(i.format == ModelInput.Format.Value("FORMAT_NONE") for i in plain.input)

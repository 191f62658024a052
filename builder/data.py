"""Calibration and evaluation samples: read, check against the spec, return per input.

Arrays have a leading sample axis, then the input's ``dims`` (no batch axis), also
for models with ``max_batch_size: 0``, whose samples are then fed one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from builder.dtypes import to_numpy
from builder.errors import DataError, ModelRefused
from builder.factories import import_factory
from builder.spec import DataSpec, DType, ModelSourceKind, ModelSpec, TensorSpec
from builder.spec.probe import probe_record
from builder.spec.synthetic import synthetic_array, token_ranges
from builder.tasks import task
from builder.tasks.base import CoreInputs
from builder.tasks.object_detection import letterboxed_images

# Exceptions a user's reader raises for bad data; turned into one-line DataErrors.
_READER_ERRORS = (OSError, ValueError, KeyError, TypeError, IndexError)


def load_samples(
    data: DataSpec, model: ModelSpec, *, spec_dir: Path, spec_file: Path, section: str
) -> dict[str, NDArray[Any]]:
    """Read ``data`` (an .npz or a reader factory), check it fits ``model``'s inputs."""
    path = spec_dir / data.data if data.data is not None else None
    where: Path = path if path is not None else spec_file
    if path is not None and not path.exists():
        raise DataError("data not found", file=path, model=model.name, field=f"{section}.data")
    if data.reader is not None:
        arrays = _from_reader(data, model, path, spec_dir, spec_file, section)
    elif model.source_kind is ModelSourceKind.CHECKPOINT and path is not None and path.suffix != ".npz":
        arrays = _from_checkpoint(model, path, spec_dir, section)
    elif model.detection is not None and path is not None and path.suffix != ".npz":
        arrays = _from_images(model, path, section)
    else:
        assert path is not None  # DataSpec requires data or reader
        arrays = _from_npz(path, model.name, section)
    return _checked(arrays, model, data.max_samples, file=where, section=section)


def _from_reader(
    data: DataSpec, model: ModelSpec, path: Path | None, spec_dir: Path, spec_file: Path, section: str
) -> Mapping[str, object]:
    assert data.reader is not None
    field = f"{section}.reader"
    reader = import_factory(data.reader, spec_dir, spec_file=spec_file, model=model.name, field=field)
    try:
        arrays = reader(path)
    except _READER_ERRORS as exc:
        raise DataError(
            f"reader '{data.reader}' failed: {type(exc).__name__}: {exc}",
            file=path or spec_file,
            model=model.name,
            field=field,
        ) from None
    if not isinstance(arrays, Mapping):
        raise DataError(
            f"reader '{data.reader}' returned {type(arrays).__name__}, not a dict of arrays",
            file=path or spec_file,
            model=model.name,
            field=field,
        )
    return arrays


def _from_checkpoint(model: ModelSpec, path: Path, spec_dir: Path, section: str) -> dict[str, NDArray[Any]]:
    """Data read as the model's task reads them (texts, one a line, or a folder of images), through
    the checkpoint's own tokenizer or image processor."""
    served = task(model.task)
    try:
        return served.read_data(path, core_inputs(model, spec_dir))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"expected {served.data_description}: {type(exc).__name__}: {exc}", file=path,
                        model=model.name, field=f"{section}.data") from None  # fmt: skip


def _from_images(model: ModelSpec, path: Path, section: str) -> dict[str, NDArray[Any]]:
    """A folder of images (or one image) through a YOLO-style detector's letterbox, as served."""
    assert model.detection is not None
    image = model.inputs[0]
    recipe = model.detection.recipe(image.dims, image.dtype.value)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    try:
        return {image.name: letterboxed_images(files, recipe)}
    except (OSError, ValueError) as exc:
        raise DataError(f"expected a folder of images: {exc}", file=path, model=model.name,
                        field=f"{section}.data") from None  # fmt: skip


def core_inputs(model: ModelSpec, spec_dir: Path) -> CoreInputs:
    """What a checkpoint's task reads data into: its folder, and the inputs at their largest."""
    folder = Path(model.source) if Path(model.source).is_absolute() else spec_dir / model.source
    return CoreInputs(folder, {t.name: list(model.shape_range(t).max) for t in model.inputs})


def _from_npz(path: Path, model: str, section: str) -> dict[str, NDArray[Any]]:
    field = f"{section}.data"
    if not path.is_file():
        raise DataError("expected an .npz file (or give a reader)", file=path, model=model, field=field)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read .npz: {exc}", file=path, model=model, field=field) from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise DataError("not an .npz archive", file=path, model=model, field=field)
    try:
        return {name: loaded[name] for name in loaded.files}
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read .npz: {exc}", file=path, model=model, field=field) from None
    finally:
        loaded.close()


def _checked(
    arrays: Mapping[str, object], model: ModelSpec, max_samples: int | None, *, file: Path, section: str
) -> dict[str, NDArray[Any]]:
    specs = {t.name: t for t in model.inputs}

    def fail(message: str, field: str) -> DataError:
        return DataError(message, file=file, model=model.name, field=f"{section}.data{field}")

    unknown = sorted(set(arrays) - set(specs))
    if unknown:
        raise fail(f"arrays {unknown} are not inputs of the model (inputs: {sorted(specs)})", "")
    missing = sorted(n for n, t in specs.items() if not t.optional and n not in arrays)
    if missing:
        raise fail(f"no array for inputs {missing}", "")
    out: dict[str, NDArray[Any]] = {}
    for name, value in arrays.items():
        field = f": input '{name}'"
        if not isinstance(value, np.ndarray):
            raise fail(f"expected a numpy array, got {type(value).__name__}", field)
        if specs[name].dims == [1] and value.ndim == 1:
            value = value[:, np.newaxis]  # one scalar a sample
        problem = _problem(value, specs[name], model)
        if problem:
            raise fail(problem, field)
        out[name] = _as_dtype(value, specs[name].dtype)
    counts = {name: a.shape[0] for name, a in out.items()}
    if len(set(counts.values())) > 1:
        raise fail(f"inputs have different sample counts: {counts}", "")
    if not counts or next(iter(counts.values())) == 0:
        raise fail("no samples", "")
    if max_samples is not None:
        out = {name: a[:max_samples] for name, a in out.items()}
    return out


def _problem(value: NDArray[Any], spec: TensorSpec, model: ModelSpec) -> str | None:
    """What is wrong with one input's array, or None."""
    if not _dtype_ok(value.dtype, spec.dtype):
        return f"dtype {value.dtype} does not match the spec's {spec.dtype.value} ({to_numpy(spec.dtype)})"
    want = ["N", *spec.dims]
    if value.ndim != len(spec.dims) + 1:
        return (
            f"shape {list(value.shape)} has rank {value.ndim}; expected {want} "
            "(samples first, then dims without the batch dimension)"
        )
    rng = model.shape_range(spec)
    for axis, (got, dim) in enumerate(zip(value.shape[1:], spec.dims, strict=True)):
        if dim != -1 and got != dim:
            return (
                f"shape {list(value.shape)}: axis {axis + 1} is {got}, spec dims say {dim} (expected {want})"
            )
        if dim == -1 and not rng.min[axis] <= got <= rng.max[axis]:
            return (
                f"shape {list(value.shape)}: dynamic axis {axis + 1} is {got}, outside the profile's "
                f"{rng.min[axis]}..{rng.max[axis]}"
            )
    return None


def _dtype_ok(got: np.dtype[Any], want: DType) -> bool:
    if want is DType.STRING:
        return got.kind in "OSU"
    return got == to_numpy(want)


def _as_dtype(value: NDArray[Any], dtype: DType) -> NDArray[Any]:
    if dtype is DType.STRING:
        return value.astype(np.object_)
    return np.ascontiguousarray(value, dtype=to_numpy(dtype))


SYNTHETIC_SAMPLES = 8
SYNTHETIC_SEED = 0


def synthetic_samples(
    model: ModelSpec,
    count: int = SYNTHETIC_SAMPLES,
    *,
    spec_dir: Path | None = None,
    graph: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, NDArray[Any]]:
    """Samples for a model without evaluation data, at the first profile's opt shapes: seeded
    standard-normal floats, and integers as their names and ``graph`` (the exported model) say
    (``builder.spec.synthetic``); a variant is held against the source graph on them. A checkpoint's
    are its task's samples where it has some (a text task's sample texts through its tokenizer).

    Where the spec's fill probed the opt shape with ONNX Runtime, ``log`` says so; where no shape
    tried ran, the refusal says the samples are synthetic at a guessed shape and what fixes it."""
    if model.task is not None and spec_dir is not None:
        samples = task(model.task).sample_inputs(core_inputs(model, spec_dir), count)
        if samples is not None:
            return samples
    if spec_dir is not None:
        _probed(model, spec_dir, log)
    vocab = _token_ranges(graph if graph is not None else _source_graph(model, spec_dir))
    rng = np.random.default_rng(SYNTHETIC_SEED)
    return {
        t.name: synthetic_array(
            t.name, to_numpy(t.dtype), [count, *model.shape_range(t).opt], rng, vocab.get(t.name)
        )
        for t in model.inputs
    }


def _source_graph(model: ModelSpec, spec_dir: Path | None) -> Path | None:
    if spec_dir is None or model.source_kind is not ModelSourceKind.ONNX:
        return None
    return spec_dir / model.source


def _token_ranges(path: Path | None) -> dict[str, int]:
    if path is None or not path.is_file():
        return {}
    import onnx

    return token_ranges(onnx.load(str(path), load_external_data=False))


def _probed(model: ModelSpec, spec_dir: Path, log: Callable[[str], None] | None) -> None:
    """The log line for an opt shape ONNX Runtime was probed for, or the error where none ran."""
    source = _source_graph(model, spec_dir)
    probe = probe_record(source, model.name) if source is not None else None
    if probe is None or any(model.shape_range(t).opt != probe.opt.get(t.name, model.shape_range(t).opt)
                            for t in model.inputs):  # fmt: skip
        return  # the spec's own shapes, or a fill this process did not make
    if probe.ran:
        if log is not None:
            log(f"[{model.name}] {probe.describe()}")
        return
    raise ModelRefused(probe.describe())

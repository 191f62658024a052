"""What a checkpoint task is: everything the builder does differently for one of transformers'
pipeline tasks, asked of one object.

A task names the ``AutoModel...`` class the export stage loads and the architectures that can do it;
it says what the core model takes and gives (from the ``Checkpoint`` the spec read), what the traced
module returns from transformers' output, which Python-backend models stand before and after the
core model and how the ensemble wires them, how its calibration and evaluation data are read, and
its default tolerances. ``TextTask`` (``text.py``) and ``ImageTask`` (``image.py``) hold what a
modality decides (the tokenizer or the image processor, the input tensors, the data files); a task
module subclasses one of them and adds its outputs, post-processing and wiring.

This package sits below ``builder/spec`` (the spec composes a checkpoint's entries when it loads),
so it takes plain values: the ``Checkpoint`` record and ``CoreInputs``, never a ``ModelSpec``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from numpy.typing import NDArray

PYTHON_MODELS = Path(__file__).parents[1] / "python_models"
DEFAULT_MAX_BATCH_SIZE = 8
DEFAULT_TOLERANCES: dict[str, dict[str, Any]] = {
    "fp32": {"min_cosine": 0.9999},
    "fp16": {"min_cosine": 0.999},
    "int8": {"min_cosine": 0.98},
    "int8_dynamic": {"min_cosine": 0.98},
}

Entry = dict[str, Any]  # a spec entry, or a part of one, as models.yaml would state it
Samples = dict[str, NDArray[Any]]  # per core input, samples first


class Modality(str, Enum):
    """What a task's requests carry, and so how its checkpoint and data are read."""

    TEXT = "text"  # texts through the checkpoint's tokenizer
    IMAGE = "image"  # encoded images through the checkpoint's image processor


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint folder states that the spec needs (read by ``builder/spec/checkpoint.py``)."""

    folder: Path
    source: str  # as the spec writes it (relative to the spec's folder)
    task: CheckpointTask
    inputs: list[str]  # the tokenizer's model_input_names, or ["pixel_values"]
    hidden_size: int
    labels: dict[int, str]
    max_length: int  # text: tokens; images: 0
    image_dims: list[int]  # images: [C, H, W]
    files: list[str]  # tokenizer / image-processor files, as paths the spec resolves
    config: dict[str, Any] = field(default_factory=dict)  # config.json as it reads
    processor: dict[str, Any] = field(default_factory=dict)  # images: the image processor's settings

    def file(self, name: str) -> str:
        return f"{self.source.rstrip('/')}/{name}"


@dataclass(frozen=True)
class CoreInputs:
    """What a task's data are read into: the checkpoint's folder and the core model's inputs, in
    order, each at its largest shape (the first profile's max, without the batch axis)."""

    folder: Path
    largest: dict[str, list[int]]


def tensor(name: str, dtype: str, dims: list[int]) -> Entry:
    return {"name": name, "dtype": dtype, "dims": dims}


def same(names: list[str]) -> dict[str, str]:
    """An ensemble step's map of tensors handed on under their own names."""
    return {n: n for n in names}


def preprocess_name(name: str) -> str:
    return f"{name}_preprocess"


def postprocess_name(name: str) -> str:
    return f"{name}_postprocess"


class CheckpointTask(ABC):
    """One task a checkpoint is served for. The class attributes name it; the methods say what
    differs per task. ``core_entry``, ``python_models`` and ``ensemble`` compose the spec entries
    from them and are the same for every task."""

    name: ClassVar[str]  # as transformers' pipeline() names it, and models.yaml's task:
    modality: ClassVar[Modality]
    auto_class: ClassVar[str]  # the transformers AutoModel class the export stage loads it with
    mapping: ClassVar[str]  # modeling_auto's model_type -> class mapping of the architectures that do it
    architecture_suffix: ClassVar[str]  # config.architectures names that end so do it (tritonforge init)
    data_description: ClassVar[str]  # what its calibration and evaluation data files are, for errors
    tolerances: ClassVar[dict[str, Entry]] = DEFAULT_TOLERANCES  # per precision, where the entry states none

    # -- the checkpoint -----------------------------------------------------------------------------

    def refusal(self, ckpt: Checkpoint) -> str | None:
        """Why this checkpoint cannot do the task, beyond its architecture (checked when the spec
        loads; None: it can)."""
        return None

    def claims(self, config: dict[str, Any]) -> bool:
        """Whether a checkpoint whose architecture more than one task ends in is this task's, by its
        ``config.json`` (``tritonforge init``; False: the first task registered for it)."""
        return False

    # -- the core model -----------------------------------------------------------------------------

    @abstractmethod
    def core_inputs(self, ckpt: Checkpoint) -> list[Entry]:
        """The core model's input tensors."""

    def profiles(self, ckpt: Checkpoint) -> list[Entry]:
        """The core model's optimization profiles (none: its inputs have fixed dims)."""
        return []

    @abstractmethod
    def core_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        """The core model's output tensors: what ``traced_outputs`` returns, in order."""

    def feed(self, feed: dict[str, Any], accepted: set[str]) -> dict[str, Any]:
        """The keyword arguments the transformers model is called with, from the core inputs'
        tensors (``accepted``: the model's forward parameters)."""
        return feed

    @abstractmethod
    def traced_outputs(self, result: Any, feed: dict[str, Any]) -> Any:
        """What the traced module returns from the transformers model's output: a tensor, or a
        tuple of them in the order of ``core_outputs``."""

    # -- the Python-backend models and the ensemble ---------------------------------------------------

    @abstractmethod
    def preprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry:
        """``<name>_preprocess``: the request's texts or images to the core inputs (and whatever its
        post-processing needs besides)."""

    def postprocess(self, ckpt: Checkpoint, name: str, common: Entry) -> Entry | None:
        """``<name>_postprocess``: the core outputs to the pipeline's answer (None: the core
        outputs are the answer)."""
        return None

    @abstractmethod
    def pipeline_steps(self, ckpt: Checkpoint, name: str) -> list[Entry]:
        """The ensemble's steps after the preprocessing one: the core model's, then any others."""

    def pipeline_outputs(self, ckpt: Checkpoint) -> list[Entry]:
        """The ensemble's outputs: by default the post-processing model's (a task without one
        states them)."""
        post = self.postprocess(ckpt, "", {})
        if post is None:
            raise NotImplementedError(f"{self.name}: without post-processing, a task states its outputs")
        outputs: list[Entry] = post["outputs"]
        return outputs

    # -- data ---------------------------------------------------------------------------------------

    @abstractmethod
    def read_data(self, path: Path, core: CoreInputs) -> Samples:
        """Calibration or evaluation data that are not an .npz, through the checkpoint's own
        processing (OSError, ValueError, UnicodeDecodeError: not ``data_description``)."""

    def sample_inputs(self, core: CoreInputs, count: int) -> Samples | None:
        """Inputs to verify on where the spec gives no evaluation data (None: random ones)."""
        return None

    # -- the composed entries -----------------------------------------------------------------------

    def core_entry(self, ckpt: Checkpoint, entry: Entry) -> Entry:
        """The ``models:`` entry, with what it leaves out filled in from the checkpoint."""
        out = {"max_batch_size": DEFAULT_MAX_BATCH_SIZE, **entry}
        out.setdefault("inputs", self.core_inputs(ckpt))
        out.setdefault("outputs", self.core_outputs(ckpt))
        profiles = self.profiles(ckpt)
        if profiles:
            out.setdefault("profiles", profiles)
        precisions = out.get("precisions", ["fp32"])
        if "tolerances" not in out and isinstance(precisions, list):
            out["tolerances"] = {p: self.tolerances[p] for p in precisions if p in self.tolerances}
        return out

    def python_models(self, ckpt: Checkpoint, name: str, batch: int) -> list[Entry]:
        """The ``python_models:`` entries: the preprocessing model and any post-processing one."""
        common: Entry = {"max_batch_size": batch, "batching": {"enabled": True}}
        post = self.postprocess(ckpt, name, common)
        return [self.preprocess(ckpt, name, common), *([post] if post is not None else [])]

    def ensemble(self, ckpt: Checkpoint, name: str, batch: int) -> Entry:
        """``<name>_pipeline``: the preprocessing model's input in, the task's answer out."""
        pre = self.preprocess(ckpt, name, {})
        first = {
            "model": pre["name"],
            "inputs": same([t["name"] for t in pre["inputs"]]),
            "outputs": same([t["name"] for t in pre["outputs"]]),
        }
        steps = [first, *self.pipeline_steps(ckpt, name)]
        outputs = self.pipeline_outputs(ckpt)
        return {"name": f"{name}_pipeline", "max_batch_size": batch, "inputs": pre["inputs"],
                "outputs": outputs, "steps": steps}  # fmt: skip

"""Candidate configs generated from the spec, never outside the model's profile.

A candidate sets four things: instance count, max queue delay, preferred batch
sizes and max batch size; on a target whose runner has the setting (the local target's
onnx_runner), also whether ONNX Runtime's idle workers spin. Everything else comes from
the spec unchanged. The bounds come from the spec itself:

* ``max_batch_size`` is the profile's max batch: candidates never exceed the spec's
  value and never go below the profile's ``opt_batch``, the warm-up batch sizes, or
  the ``max_batch_size`` of an ensemble that calls the model.
* preferred batch sizes never exceed the candidate's ``max_batch_size``.
* every candidate is applied to the whole spec and validated by the spec's own
  validators; one that fails is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from builder.python_models.shared.runtimes import Knobs
from builder.python_models.shared.runtimes.base import INTRA_OP_THREADS
from builder.python_models.shared.runtimes.onnxruntime import OnnxRuntime, spinning
from builder.spec import ModelSpec, Spec
from builder.targets import Target, served_here

DEFAULT_DELAYS_US = (0, 500, 2000, 8000)
MAX_INSTANCES = 4


@dataclass(frozen=True, order=True)
class Candidate:
    instances: int
    max_queue_delay_us: int
    preferred_batch_sizes: tuple[int, ...]
    max_batch_size: int
    spinning: bool | None = None  # targets.local.spinning; None = the runner's rule (runner_spins)
    threads: int = 0  # serve.threads, not searched (0: the cores shared out among the instances)

    @property
    def label(self) -> str:
        pref = ",".join(str(s) for s in self.preferred_batch_sizes) or "-"
        spin = "" if self.spinning is None else " spin" if self.spinning else " nospin"
        return f"i{self.instances} d{self.max_queue_delay_us} p[{pref}] mb{self.max_batch_size}{spin}"

    def to_dict(self) -> dict[str, object]:
        return {
            "instances": self.instances,
            "max_queue_delay_us": self.max_queue_delay_us,
            "preferred_batch_sizes": list(self.preferred_batch_sizes),
            "max_batch_size": self.max_batch_size,
            "spinning": self.spinning,
        }


def runner_spins(cand: Candidate, cores: int | None = None) -> bool:
    """Whether ONNX Runtime's idle workers spin for ``cand`` on a machine of ``cores`` (default:
    this one, which the tuner measures on): the served runtime's own rule, for the parameters it
    writes (as set, else only where the instances' intra-op threads leave a core free)."""
    params = OnnxRuntime().parameters(Knobs(threads=cand.threads, spinning=cand.spinning))
    if cores is not None and not cand.threads:  # the cores shared out as on a machine of ``cores``
        params[INTRA_OP_THREADS] = str(max(1, cores // cand.instances))
    return spinning(params, cand.instances, cores)


def of_spec(model: ModelSpec) -> Candidate:
    """The spec's own (hand-written) config as a candidate."""
    return Candidate(
        instances=model.instances.count,
        max_queue_delay_us=model.batching.max_queue_delay_us,
        preferred_batch_sizes=tuple(model.batching.preferred_batch_sizes),
        max_batch_size=model.max_batch_size,
        spinning=served_here().knobs(model).spinning,
        threads=model.serve.threads,
    )


def apply(model: ModelSpec, cand: Candidate) -> ModelSpec:
    """The model's spec with the candidate's values, validated (ModelSpec.model_copy + re-validation)."""
    updated = model.model_copy(
        update={
            "max_batch_size": cand.max_batch_size,
            "batching": model.batching.model_copy(
                update={
                    "enabled": True,
                    "preferred_batch_sizes": list(cand.preferred_batch_sizes),
                    "max_queue_delay_us": cand.max_queue_delay_us,
                }
            ),
            "instances": model.instances.model_copy(update={"count": cand.instances}),
            "targets": _with_spinning(model, cand.spinning),
        }
    )
    # model_copy does not validate: run the spec's validators on the result.
    return ModelSpec.model_validate(updated.model_dump())


def _with_spinning(model: ModelSpec, spinning: bool | None) -> dict[str, dict[str, object]] | None:
    """The model's ``targets`` with ``targets.<local>.spinning`` set (removed for None)."""
    name = served_here().name
    local = {k: v for k, v in model.target_options(name).items() if k != "spinning"}
    if spinning is not None:
        local["spinning"] = spinning
    targets = {k: v for k, v in (model.targets or {}).items() if k != name} | ({name: local} if local else {})
    return targets or None


def apply_to_spec(spec: Spec, name: str, cand: Candidate) -> Spec:
    """The whole spec with one model replaced; validated (ensemble bounds included)."""
    models = [apply(m, cand) if m.name == name else m for m in spec.models]
    return Spec.model_validate({**spec.model_dump(), "models": [m.model_dump() for m in models]})


@dataclass(frozen=True)
class SearchSpace:
    """The values each dimension may take, all within the profile."""

    instances: tuple[int, ...]
    delays_us: tuple[int, ...]
    preferred: tuple[tuple[int, ...], ...]
    max_batch_sizes: tuple[int, ...]
    min_batch: int  # lowest max_batch_size the spec allows (profile opt, warm-up, ensembles)
    max_batch: int  # the profile's max batch (the spec's max_batch_size)
    notes: list[str] = field(default_factory=list)
    spinning: tuple[bool | None, ...] = ()  # empty where the target has no such setting


def batch_bounds(spec: Spec, model: ModelSpec) -> tuple[int, int, list[str]]:
    """(lowest, highest) max_batch_size the spec allows for ``model``, and why."""
    high = model.max_batch_size
    lows = {"profile opt_batch": model.opt_batch() if model.profiles else 1}
    if model.warmup:
        lows["warm-up batch sizes"] = max(model.warmup.batch_sizes)
    for ens in spec.ensembles:
        if any(step.model == model.name for step in ens.steps):
            lows[f"ensemble {ens.name}"] = max(lows.get(f"ensemble {ens.name}", 1), ens.max_batch_size)
    low = max(lows.values())
    why = max(lows, key=lambda k: lows[k])
    notes = [f"max_batch_size in [{low}, {high}]: {high} is the profile's max, {low} from {why}"]
    return min(low, high), high, notes


def search_space(
    spec: Spec,
    name: str,
    *,
    cpus: int,
    budget_ms: float,
    delays_us: Sequence[int] = DEFAULT_DELAYS_US,
    max_instances: int = MAX_INSTANCES,
    target: Target | None = None,
) -> SearchSpace:
    """Every value a candidate may take for model ``name`` on ``target`` (default: the one
    served here, which the tuner measures on)."""
    model = spec.model(name)
    if not model.batched:
        raise ValueError(f"model '{name}' has max_batch_size 0: there is no batching to tune")
    if model.sequence is not None:
        raise ValueError(f"model '{name}' is stateful: the sequence batcher schedules it; nothing to tune")
    low, high, notes = batch_bounds(spec, model)
    own = of_spec(model)
    batches = sorted({b for b in _powers_of_two(low, high)} | {low, high, own.max_batch_size})
    instances = sorted({*range(1, min(max_instances, cpus + 1) + 1), own.instances})
    # A queue delay at or above the budget fails it at concurrency 1 (the lone request waits
    # the whole delay), so it cannot win: it is never proposed.
    budget_us = budget_ms * 1000.0
    delays = sorted({d for d in (*delays_us, own.max_queue_delay_us) if d < budget_us})
    dropped = [d for d in delays_us if d >= budget_us]
    if dropped:
        notes.append(f"queue delays {dropped} us dropped: not below the {budget_ms:g} ms budget")
    opt = model.opt_batch()
    preferred = {(), (opt,), own.preferred_batch_sizes}
    if opt * 2 <= high:
        preferred.add((opt, opt * 2))
    if opt // 2 >= 1 and opt // 2 != opt:
        preferred.add((opt // 2, opt))
    return SearchSpace(
        instances=tuple(instances),
        delays_us=tuple(delays),
        preferred=tuple(sorted(p for p in preferred if all(s <= high for s in p))),
        max_batch_sizes=tuple(batches),
        min_batch=low,
        max_batch=high,
        notes=notes,
        spinning=(True, False) if (target or served_here()).serves_spinning else (),
    )


def within(space: SearchSpace, cand: Candidate) -> bool:
    """True when every value of the candidate is one the space (the profile) allows."""
    return (
        space.min_batch <= cand.max_batch_size <= space.max_batch
        and all(1 <= s <= cand.max_batch_size for s in cand.preferred_batch_sizes)
        and cand.instances >= 1
    )


def normalize(cand: Candidate, max_concurrency: int) -> Candidate:
    """The cheapest equivalent candidate under perf_analyzer's closed loop of batch-1 requests.

    At most ``max_concurrency`` requests are ever queued, so preferred sizes above it are
    never formed; preferred sizes are a set, sorted; unset spinning is what the runner does
    with that many instances. Two candidates that normalize to the same value behave the same
    and only one is measured.
    """
    reachable = tuple(sorted({s for s in cand.preferred_batch_sizes if s <= max_concurrency}))
    return Candidate(
        cand.instances,
        cand.max_queue_delay_us,
        reachable,
        cand.max_batch_size,
        runner_spins(cand),
        cand.threads,
    )


def equivalence_key(cand: Candidate, max_concurrency: int) -> tuple[object, ...]:
    """Candidates with equal keys are indistinguishable by the measurement (see normalize);
    max_batch_size above the highest concurrency only caps batches never formed."""
    n = normalize(cand, max_concurrency)
    return (
        n.instances,
        n.max_queue_delay_us,
        n.preferred_batch_sizes,
        min(n.max_batch_size, max_concurrency),
        n.spinning,
    )


def valid(spec: Spec, name: str, cand: Candidate) -> bool:
    try:
        apply_to_spec(spec, name, cand)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return False
    return True


def _powers_of_two(low: int, high: int) -> list[int]:
    out, b = [], 1
    while b <= high:
        if b >= low:
            out.append(b)
        b *= 2
    return out

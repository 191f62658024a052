"""Errors the command line turns into one line: the user's (exit status 2), and the build's own
failures (exit status 1): a stage's defect, or the host refusing what the build needs."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """Bad input from the user: a spec, a data file or an argument.

    ``where`` names the file, ``model`` the model and ``field`` the field (or the
    variant), so that the message reads ``file: model 'x': field: what is wrong``.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        model: str | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.model = model
        self.field = field
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = []
        if self.file:
            parts.append(self.file)
        if self.model:
            parts.append(f"model '{self.model}'")
        if self.field:
            parts.append(self.field)
        parts.append(" ".join(self.message.split()))
        return ": ".join(parts)


class SpecError(UserError):
    """models.yaml is malformed or inconsistent with itself or the ONNX graph."""


class DataError(UserError):
    """Calibration or evaluation data is missing or does not fit the model."""


class VerificationError(UserError):
    """No variant of a model met its tolerances, so nothing can be published."""


class BuildError(Exception):
    """A stage failed for a reason that is not the user's input (exit status 1)."""


class ModelRefused(Exception):
    """A named, expected reason that the user's model, or one variant of it, cannot be made: a
    library refused the graph, the quantizer quantized nothing, a converted graph does not run.

    The build drops the variant (or leaves the model out) and says why in one line; any other
    exception in a stage is a defect of the builder (:class:`StageDefect`)."""


class StageDefect(BuildError):
    """An unexpected exception in a stage: a defect of the builder, not of the user's input. The
    traceback is kept in ``log`` (exit status 1)."""

    def __init__(self, model: str, stage: str, summary: str, log: Path) -> None:
        self.model = model
        self.stage = stage
        self.summary = summary
        self.log = log
        super().__init__(
            f"model '{model}': {stage} stage: {summary} (a defect of tritonforge, not of the model; "
            f"traceback in {log}; please report it with that file)"
        )


class EnvironmentFault(BuildError):
    """The host refused what a command needs: no space left on a device, a permission, memory, a
    port already taken, open files. Neither the user's input nor a defect of tritonforge: one line
    naming what and where (``no space left on device writing <path>``), exit status 1, and the
    traceback kept in ``log`` (the command line writes one where the raiser could not)."""

    def __init__(self, what: str, log: Path | None = None) -> None:
        self.what = what
        self.log = log
        super().__init__(what)

"""The few ``triton_python_backend_utils`` names the Python-backend models call, for running a model's
``execute`` without Triton (a test double: it never answers a user)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np


class Request:
    """A request: its input tensors by name, and its parameters as Triton hands them (JSON text)."""

    def __init__(self, tensors: dict[str, Any], parameters: dict[str, Any] | None = None) -> None:
        self.tensors, self.params = tensors, json.dumps(parameters or {})

    def parameters(self) -> str:
        return self.params


class FakePb:
    class TritonError:
        def __init__(self, message: str) -> None:
            self.message = message

    class InferenceResponse:
        def __init__(self, output_tensors: Any = None, error: Any = None) -> None:
            self.outputs = {t.name: t.array for t in output_tensors or []}
            self.error = error

    class Tensor:
        def __init__(self, name: str, array: np.ndarray[Any, Any]) -> None:
            self.name, self.array = name, array

    @staticmethod
    def get_input_tensor_by_name(request: Request, name: str) -> Any:
        class Held:
            def as_numpy(self) -> Any:
                return request.tensors[name]

        return Held()

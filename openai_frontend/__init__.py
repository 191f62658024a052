"""An OpenAI-compatible HTTP endpoint over the Triton LLM models' own streaming gRPC interface.

A thin frontend: it parses OpenAI requests with the ``openai`` package's own types, sends each
as one ``ModelStreamInfer`` call (``text_input`` or ``messages``, ``sampling_parameters``...), and
writes the answers back in OpenAI's shapes; admission, priority, cancellation and metrics stay
the Triton model's. The module imports nothing heavy: ``app`` imports FastAPI and the SDK types.

``create_app(settings, engine)`` (``app``) serves one router per endpoint (``routes/``) over an
``engine.Engine``; ``triton.TritonEngine`` is tritonserver's, ``server.OpenAIServer`` runs it with
uvicorn. Its own distribution, ``tritonforge-openai`` (``pyproject.toml`` here), needs the clients
(``tritonforge-client``) and not the builder: the vLLM serving image installs the two alone.
"""

from __future__ import annotations

DEFAULT_PORT = 9000  # the port Triton's own OpenAI frontend uses
API_KEY_ENV = "TRITONFORGE_OPENAI_API_KEY"
DEFAULT_MAX_BODY_BYTES = 1 << 20  # a prompt of a few hundred thousand tokens

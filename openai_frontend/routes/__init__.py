"""One router per endpoint, as Triton's own OpenAI frontend has them (r25.10
``frontend/fastapi/routers``): ``models``, ``completions``, ``chat``, ``embeddings``, and ``rerank``
(vLLM's rerank and score paths). Each reads the engine from ``request.app.engine``; ``generate`` is
what completions and chat share."""

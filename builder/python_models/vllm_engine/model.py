"""Triton Python-backend model (decoupled) running vLLM's asynchronous engine inside tritonserver.

Speaks the interface of Triton's vLLM backend: inputs ``text_input``, ``stream``,
``sampling_parameters`` (JSON), ``exclude_input_in_output``, ``return_finish_reason``,
``return_cumulative_logprob``, ``return_logprobs``, ``return_num_input_tokens``,
``return_num_output_tokens``; outputs ``text_output``, ``finish_reason``, ``cumulative_logprob``,
``logprobs`` (JSON: per new token, ``{token_id: {logprob, rank, decoded_token}}``, the generated token
first; ``null`` unless ``sampling_parameters.logprobs`` is set), ``num_input_tokens``, ``num_output_tokens``.
Engine arguments come from ``model.json`` in the version folder (``model`` may be relative to that
folder). LoRA as in Triton's vLLM backend: with ``enable_lora`` in model.json, ``multi_lora.json`` in
the version folder maps adapter names to folders (relative ones resolved against the version folder
here), and a request names its adapter with ``lora_name`` in ``sampling_parameters`` (or the request
parameters); without it the base model answers, and an unknown name is refused in that backend's
words, naming the adapters there are. Beyond that interface: ``messages`` (a JSON list of chat
messages rendered with the tokenizer's chat template) and ``priority`` (an input or a request
parameter; lower runs first, vLLM's convention).

The engine runs on its own event loop thread; responses go out through one sender thread so the
loop never waits on the server. That thread alone asks ``is_cancelled()``, and only of requests
whose final response it has not sent (python_backend frees a sender with its final response).
A request finding ``max_num_seqs + max_waiting_requests`` requests in flight is refused at once.
Lanes (config parameter ``lanes``) give long jobs engines of their own: a request whose prompt plus
``max_tokens`` reaches a lane's ``min_tokens``, whose ``max_tokens`` reaches its ``min_max_tokens`` or
whose prompt reaches its ``min_prompt_tokens`` runs there, so short requests never queue behind them.
Each lane's engine gets CPUs of its own (``place_lanes``); where the host cannot give every engine one
beside the server's, the long lanes run on the default engine at a lower priority instead.
The config parameter ``sampling_defaults`` (models.yaml's ``sampling:``) fills the sampling values a
request leaves out or sends as null; without it vLLM's own defaults apply (``max_tokens`` 16).
Unloading drains, as Triton's vLLM backend does: requests in flight run to their end and their final
responses go out before the engines stop. Triton unloads the model only once no request's sender is
left (an older python_backend frees the response factory, which holds the model, with it): the sending thread
drops each with its final response. Should the stub die without finalize() all the same, a watcher
process kills the engines' processes (``orphans``).
A helper thread that meets an error logs it and goes on;
one that dies, or an engine whose core process died, makes the model answer UNAVAILABLE, and with
the config parameter ``ENABLE_VLLM_HEALTH_CHECK`` (that backend's) unload itself, so that it stops
being READY (a model can unload itself only under explicit model control).
Metrics: those of Triton's vLLM backend (``vllm:prompt_tokens_total``, ``vllm:e2e_request_latency_seconds``
..., with its buckets and its labels, model and version), ``vllm:kv_cache_usage_perc``
(vLLM's own name) and ``tritonforge:requests_refused_total``, on Triton's metrics port.
This file puts together the parts in ``utils/``, one concern each: request parsing (``requests``,
``lora``), lanes and admission (``lanes``), responses and the sending thread (``responses``,
``sending``), the engines' lifecycle (``engine``, ``orphans``), health (``health``) and metrics
(``metrics``); the names it shares with the builder and the clients are in ``contract.py``. The
repository writer copies the whole package into the version folder, where they import as siblings.
The parsing helpers import without Triton or vLLM, so tests call them directly.
"""

from __future__ import annotations

import asyncio
import collections
import json
import locale
import os
import queue
import threading
from pathlib import Path
from typing import Any

import numpy as np

from .contract import (
    HEALTH_CHECK,
    LANES,
    LORA_NAMES,
    MAX_WAITING,
    MESSAGES,
    REFUSED,
    SAMPLING_DEFAULTS,
    STREAM_MAX_RESPONSES_PER_S,
    STREAM_MIN_GAP_MS,
    TEXT_INPUT,
    UNHEALTHY,
)
from .utils.engine import EngineLifecycle, config_parameter, engine_args, yield_to_engines
from .utils.lanes import Lane, LaneRule, parse_lanes, place_lanes, placement_note, route
from .utils.lora import check_lora_names, choose_adapter, lora_request, parse_multi_lora
from .utils.metrics import Metrics, metric_families
from .utils.orphans import watch_engines
from .utils.requests import (
    BadRequest,
    Parsed,
    check_length,
    parse_defaults,
    parse_max_rate,
    parse_min_gap,
    parse_request,
    refusal,
    sampling_keys,
    sampling_params,
)
from .utils.responses import Job, error
from .utils.sending import available_cpus, default_rate

try:  # only present inside tritonserver
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - outside Triton
    pb_utils = None


class TritonPythonModel(EngineLifecycle):
    def initialize(self, args: dict[str, str]) -> None:
        # The stub runs in the C locale; torch's inductor reads UTF-8 files while vLLM imports.
        locale.setlocale(locale.LC_ALL, "C.UTF-8")
        from vllm.sampling_params import SamplingParams

        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise ValueError(f"model '{args['model_name']}': needs model_transaction_policy decoupled")
        version_dir = Path(args["model_repository"]) / args["model_version"]
        self.engine_config = engine_args(version_dir)
        self.adapters = parse_multi_lora(version_dir, self.engine_config)
        check_lora_names(config_parameter(config, LORA_NAMES, ""), self.adapters)
        self.known = set(sampling_keys(SamplingParams.__struct_fields__))
        self.defaults = parse_defaults(config_parameter(config, SAMPLING_DEFAULTS, ""), self.known)
        self.families = metric_families()
        labels = {"model": args["model_name"], "version": args["model_version"]}
        waiting = config_parameter(config, MAX_WAITING, "")
        cpus = sorted(os.sched_getaffinity(0))
        rules = place_lanes(parse_lanes(config_parameter(config, LANES, "")), cpus)
        if len(rules) > 1:
            pb_utils.Logger.log_info(f"vllm_engine: {placement_note(rules, len(cpus))}")
        if any(r.shares_default for r in rules):
            self.engine_config["scheduling_policy"] = "priority"
        self.lanes = [self._lane(r, waiting, labels) for r in rules]
        self.jobs: dict[str, Job] = {}
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)  # notified as each job posts its final response
        # (job, response, flags); a response of None tells the sending thread to watch the job.
        self.outbox: queue.Queue[tuple[Job, Any, int] | None] = queue.Queue()
        self.name = args["model_name"]
        self.health_check = config_parameter(config, HEALTH_CHECK, "false").lower() == "true"
        self.failure: str | None = None  # why the model cannot serve (the engine or a thread died)
        self.min_gap = parse_min_gap(config_parameter(config, STREAM_MIN_GAP_MS, "0"))
        given = config_parameter(config, STREAM_MAX_RESPONSES_PER_S, "")
        self.max_rate = parse_max_rate(given, default_rate(available_cpus()))
        self.in_line = collections.deque()
        pb_utils.Logger.log_info(f"vllm_engine: streamed responses within {self.max_rate:g}/s (0: no budget)")
        self._start_engines()
        # The engine's own figure (model.json may leave it to the checkpoint's config).
        self.max_model_len = int(self.lanes[0].engine.model_config.max_model_len)
        self.threads = [
            threading.Thread(target=self._guarded, args=(self._send_loop,), name="vllm-send", daemon=True)
        ]
        for thread in self.threads:
            thread.start()
        self.watcher = watch_engines()  # kills the engines if this process dies without finalize()
        yield_to_engines()

    def _lane(self, rule: LaneRule, waiting: str, labels: dict[str, str]) -> Lane:
        seqs = rule.max_num_seqs or int(self.engine_config.get("max_num_seqs", 256))
        if rule.name == "default":
            extra = int(waiting) if waiting else seqs
        else:
            extra = seqs if rule.max_waiting is None else rule.max_waiting
        # The default lane has the labels of Triton's vLLM backend (model, version); others add theirs.
        own = labels if rule.name == "default" else {**labels, "lane": rule.name}
        return Lane(rule, seqs + extra, Metrics(self.families, own))

    def execute(self, requests: list[Any]) -> None:
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if self.failure is not None:  # as Triton's vLLM backend answers once its engine is unhealthy
            for request in requests:
                unavailable = error(UNHEALTHY, pb_utils.TritonError.UNAVAILABLE)
                request.get_response_sender().send(unavailable, flags=final)
            return None
        for request in requests:
            sender = request.get_response_sender()
            try:
                job = self._job(request, sender)
            except BadRequest as exc:
                sender.send(error(str(exc)), flags=final)
                continue
            except Exception as exc:
                sender.send(error(f"request failed: {exc}", pb_utils.TritonError.INTERNAL), flags=final)
                continue
            if self._admit(job):
                asyncio.run_coroutine_threadsafe(self._generate(job), self.loop)
            else:
                job.lane.metrics.count_refusal()
                sender.send(
                    error(self._full_message(job.lane), pb_utils.TritonError.UNAVAILABLE), flags=final
                )
        return None

    def _admit(self, job: Job) -> bool:
        """Count the job in its lane, or False when the lane is at its bound."""
        with self.lock:
            if job.lane.inflight >= job.lane.bound:
                return False
            job.lane.inflight += 1
            self.jobs[job.id] = job
        return True

    def _full_message(self, lane: Lane) -> str:
        where = f"lane '{lane.rule.name}': " if len(self.lanes) > 1 else ""
        return f"{REFUSED}: {where}{lane.bound} requests running or waiting (max_num_seqs + max_waiting)"

    def _job(self, request: Any, sender: Any) -> Job:
        from vllm.sampling_params import RequestOutputKind

        def get(name: str) -> np.ndarray[Any, Any] | None:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return None if tensor is None else tensor.as_numpy()

        try:
            parsed = parse_request(get, request.parameters(), self.known, self.defaults)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"request parameters are not valid JSON ({exc.msg})") from None
        adapter = choose_adapter(parsed.lora_name, self.adapters)
        text = self._render(parsed)
        ids = list(self.tokenizer.encode(text, add_special_tokens=parsed.messages is None))
        field = TEXT_INPUT if parsed.messages is None else MESSAGES
        max_tokens = check_length(len(ids), parsed.sampling, self.max_model_len, field)
        kind = RequestOutputKind.DELTA if parsed.stream else RequestOutputKind.FINAL_ONLY
        params = sampling_params(dict(parsed.sampling, max_tokens=max_tokens), output_kind=kind)
        lane = self.lanes[route([x.rule for x in self.lanes], len(ids), max_tokens)]
        wanted = frozenset(request.requested_output_names())
        return Job(
            sender, parsed, text, ids, params, lane, wanted, n=int(params.n), lora=lora_request(adapter)
        )

    def _render(self, parsed: Parsed) -> str:
        if parsed.messages is None:
            return str(parsed.prompt)
        chat = self.tokenizer.apply_chat_template(parsed.messages, tokenize=False, add_generation_prompt=True)
        return str(chat)

    async def _generate(self, job: Job) -> None:
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        job.task = asyncio.current_task()
        self.outbox.put((job, None, 0))  # watched for cancellation from now on, before any response
        try:
            prompt = {"prompt_token_ids": job.token_ids}
            priority = job.parsed.priority + job.lane.rule.priority
            adapter = {"lora_request": job.lora} if job.lora is not None else {}
            stream = job.lane.engine.generate(prompt, job.sampling, job.id, priority=priority, **adapter)
            async for out in stream:
                self._pile(job, out)
        except asyncio.CancelledError:  # the sending thread saw is_cancelled()
            await self._abort(job)
            self._post(job, error("request cancelled", pb_utils.TritonError.CANCELLED), final)
        except Exception as exc:
            refused = refusal(exc)  # the engine's own request checks (for example logprobs' limit)
            if refused is not None:
                self._post(job, error(refused), final)
            else:
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self._post(job, error(f"generation failed: {message}", pb_utils.TritonError.INTERNAL), final)
        finally:
            if not job.done:  # the engine ended the stream without a finished output
                self._post(job, error("generation ended early", pb_utils.TritonError.INTERNAL), final)

    async def _abort(self, job: Job) -> None:
        """Abort the request in the engine by its id before its slot is freed: vLLM aborts a
        cancelled generate() itself only once add_request has completed, and a cancel before that
        would leave it generating to max_tokens while the server admits past its bound."""
        try:
            await job.lane.engine.abort(job.id)
        except Exception as exc:  # the engine is gone: nothing left generating
            pb_utils.Logger.log_warn(f"vllm_engine: abort of {job.id} failed ({exc})")

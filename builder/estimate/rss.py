"""Measured resident memory of the served process tree: tritonserver plus its Python-backend
stubs (separate processes, summed), each model loaded alone in explicit model-control mode."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder.dtypes import to_numpy
from builder.server import TritonServer
from builder.spec import ModelSpec

# ONNX Runtime serves the first run at a new input shape tensor by tensor from its arena and
# plans one memory-pattern block for that shape from it, allocated at the second run: the
# resident memory of a stub is steady from the second max-shape run on.
ROUNDS = 3


def vm_rss(pid: int) -> int:
    """VmRSS of one process in bytes (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def children(pid: int) -> list[int]:
    """Direct and indirect children of ``pid`` (from /proc/<pid>/stat's ppid field)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        frontier += kids
    return out


def tree_rss(pid: int) -> tuple[int, int]:
    """(server RSS, sum of its descendants' RSS) in bytes."""
    return vm_rss(pid), sum(vm_rss(c) for c in children(pid))


@dataclass(frozen=True)
class Load:
    """A served model to measure: its spec and the instances it is served at."""

    spec: ModelSpec
    instances: int


@dataclass
class Measured:
    model: str
    server: int  # tritonserver process
    stubs: int  # Python-backend stub processes, summed
    after_load: int  # server + stubs right after loading (warm-up done)

    @property
    def total(self) -> int:
        return self.server + self.stubs


def max_shape_requests(load: Load, url: str, name: str, rounds: int = ROUNDS) -> None:
    """``rounds`` rounds of as many concurrent requests at the max batch and the profile's max
    shape as the model is served with instances, so that every instance's stub runs the worst
    case (the plan counts activations per instance) and reaches its steady state (``ROUNDS``)."""
    from concurrent.futures import ThreadPoolExecutor

    n = max(1, load.instances)
    with ThreadPoolExecutor(n) as pool:
        for _ in range(rounds):
            for f in [pool.submit(max_shape_request, load.spec, url, name) for _ in range(n)]:
                f.result()


def max_shape_request(model: ModelSpec, url: str, name: str) -> None:
    """One request at the max batch and the profile's max shape (where the estimate is taken)."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url.split("://", 1)[1], network_timeout=300)
    batch = [model.max_batch_size] if model.batched else []
    inputs = []
    rng = np.random.default_rng(0)
    for t in model.inputs:
        shape = batch + list(model.shape_range(t).max)
        dtype = to_numpy(t.dtype)
        data = rng.random(shape).astype(dtype) if t.dtype.is_float else np.zeros(shape, dtype=dtype)
        inp = httpclient.InferInput(t.name, shape, t.dtype.value)
        inp.set_data_from_numpy(data, binary_data=True)
        inputs.append(inp)
    client.infer(name, inputs)


def measure(
    repo: Path,
    models: dict[str, Load],
    log: Callable[[str], None] = lambda _: None,
    settle_s: float = 1.0,
) -> tuple[int, list[Measured]]:
    """Baseline RSS of the empty server, then each model (served name -> what it is) loaded alone."""
    import tritonclient.http as httpclient

    results = []
    with TritonServer(repo, model_control="explicit") as server:
        assert server.pid is not None
        client = httpclient.InferenceServerClient(server.http_url.split("://", 1)[1], network_timeout=300)
        time.sleep(settle_s)
        baseline = sum(tree_rss(server.pid))
        for name, load in models.items():
            client.load_model(name)
            time.sleep(settle_s)
            after_load = sum(tree_rss(server.pid))
            max_shape_requests(load, server.http_url, name)
            time.sleep(settle_s)
            srv, stubs = tree_rss(server.pid)
            results.append(Measured(name, srv, stubs, after_load))
            log(f"measured {name}: server {srv / 2**20:.1f} MiB + stubs {stubs / 2**20:.1f} MiB")
            client.unload_model(name)
            deadline = time.monotonic() + 30
            while children(server.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
    return baseline, results


# Each LLM is loaded alone and then given max_num_seqs streams at once, each a long generation,
# so that the engine runs a full batch (activations, scheduler state) before the RSS is read.
LLM_TOKENS = 256
LLM_PROMPT = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper and the sea."}]


def measure_llms(
    repo: Path,
    llms: dict[str, int],
    log: Callable[[str], None] = lambda _: None,
    settle_s: float = 2.0,
    load_timeout_s: float = 600,
) -> tuple[int, list[Measured]]:
    """Baseline RSS of the empty server, then each LLM (name -> max_num_seqs) loaded alone: the
    server, its Python-backend stub and vLLM's engine-core process (the stub's child), summed."""
    import tritonclient.http as httpclient

    results = []
    with TritonServer(repo, model_control="explicit") as server:
        assert server.pid is not None
        address = server.http_url.split("://", 1)[1]
        client = httpclient.InferenceServerClient(address, network_timeout=load_timeout_s)
        time.sleep(settle_s)
        baseline = sum(tree_rss(server.pid))
        for name, streams in llms.items():
            log(f"loading {name} (vLLM's engine takes a minute or two to start here)")
            client.load_model(name)
            time.sleep(settle_s)
            after_load = sum(tree_rss(server.pid))
            full_batch(server.grpc_url, name, streams)
            time.sleep(settle_s)
            srv, stubs = tree_rss(server.pid)
            results.append(Measured(name, srv, stubs, after_load))
            log(f"measured {name}: server {srv / 2**20:.1f} MiB + stub and engine {stubs / 2**20:.1f} MiB")
            if name != list(llms)[-1]:  # vLLM's shutdown takes minutes on a busy host: stop does it
                client.unload_model(name)
                deadline = time.monotonic() + 300
                while children(server.pid) and time.monotonic() < deadline:
                    time.sleep(0.5)
    return baseline, results


def full_batch(url: str, name: str, streams: int, tokens: int = LLM_TOKENS) -> None:
    """``streams`` generations of ``tokens`` tokens at once (``ignore_eos``: all run to the end)."""
    from concurrent.futures import ThreadPoolExecutor

    from clients.generator import Generator

    def one(_: int) -> int:
        with Generator(url, name, "grpc", timeout=600) as gen:
            return gen.generate(LLM_PROMPT, max_tokens=tokens, ignore_eos=True).num_output_tokens

    with ThreadPoolExecutor(streams) as pool:
        done = list(pool.map(one, range(streams)))
    if any(n != tokens for n in done):
        raise RuntimeError(f"{name}: asked {tokens} tokens per stream, got {done}")

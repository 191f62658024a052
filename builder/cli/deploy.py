"""``tritonforge deploy k8s|kserve``: write manifests derived from the spec, validated."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from builder.deploy import k8s, kserve
from builder.deploy.common import DeployOptions, Manifest
from builder.deploy.kserve_releases import DEFAULT_VERSION, RELEASES
from builder.errors import BuildError, UserError
from builder.spec import Spec, load_spec

Generator = Callable[[Spec, DeployOptions], dict[str, Manifest]]
Validator = Callable[[Manifest, DeployOptions], None]
TARGETS: dict[str, tuple[Generator, Validator, str]] = {
    "k8s": (k8s.manifests, lambda doc, _: k8s.validate(doc), "kubernetes-validate"),
    "kserve": (kserve.manifests, kserve.validate, "jsonschema and kubernetes-validate"),
}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser("deploy", help="write Kubernetes or KServe manifests from the spec")
    p.add_argument(
        "target",
        choices=sorted(TARGETS),
        help="k8s: Deployment, Service, HPA; kserve: InferenceServices (and a ServingRuntime),"
        " LLMInferenceServices (KServe 0.16 on), HPAs",
    )
    p.add_argument("--spec", type=Path, default=Path("models.yaml"))
    p.add_argument("--out", type=Path, default=Path("deploy/generated"))
    p.add_argument("--name", default="tritonforge", help="resource name (a DNS-1123 label)")
    p.add_argument("--image", default="", help="the tritonforge image (default tritonforge:<version>)")
    p.add_argument(
        "--llm-image",
        default="",
        help="the vLLM image for the spec's llms (default tritonforge-vllm:<version>)",
    )
    p.add_argument(
        "--repository-url", help="serve from s3://bucket/path or gs://bucket/path instead of the image"
    )
    p.add_argument(
        "--gpus",
        type=int,
        default=1,
        help="GPUs per pod (the gpu image refuses to start without one; 0 is for a cpu-target image)",
    )
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--max-replicas", type=int, default=4)
    p.add_argument("--repo", type=Path, help="a built repository whose size goes into the memory request")
    p.add_argument(
        "--kserve-version",
        choices=list(RELEASES),
        default=DEFAULT_VERSION,
        help=f"the KServe release the KServe objects are for (default {DEFAULT_VERSION}, the newest)",
    )
    p.add_argument("--no-validate", action="store_true", help="write without validating")
    p.set_defaults(func=run)
    return p


def options(args: argparse.Namespace) -> DeployOptions:
    return DeployOptions(
        name=args.name,
        image=args.image,
        llm_image=args.llm_image,
        repository_url=args.repository_url,
        gpus=args.gpus,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        built_repo=args.repo,
        kserve_version=args.kserve_version,
    )


def check(docs: dict[str, Manifest], validator: Callable[[Manifest], None], package: str) -> bool:
    """Validate every manifest; False (and a note) when the validator is not installed."""
    try:
        for name, doc in docs.items():
            try:
                validator(doc)
            except UserError as exc:
                raise BuildError(f"generated {name} is invalid: {exc}") from None
            except ImportError:
                raise
            except Exception as exc:  # kubernetes-validate raises its own error types
                first = str(exc).splitlines()[0]
                raise BuildError(f"generated {name} is invalid: {first}") from None
    except ImportError:
        print(f"deploy: not validated ({package} is not installed)", file=sys.stderr)
        return False
    return True


def write(docs: dict[str, Manifest], out: Path, header: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, doc in docs.items():
        path = out / name
        path.write_text(header + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        paths.append(path)
    return paths


def run(args: argparse.Namespace) -> int:
    generate, validator, package = TARGETS[args.target]
    spec = load_spec(args.spec)
    opts = options(args)
    docs = generate(spec, opts)
    validated = not args.no_validate and check(docs, lambda doc: validator(doc, opts), package)
    header = (
        f"# Written by `tritonforge deploy {args.target}` from {args.spec.name}; regenerate, do not edit.\n"
    )
    for path in write(docs, args.out, header):
        print(f"{path}{'  (validated)' if validated else ''}")
    return 0

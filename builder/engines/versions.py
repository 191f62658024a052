"""Which TensorRT versions the engine builder supports, and what each one lacks.

The type stubs (10.13) describe one version; members that came later than the
oldest supported one are listed here and checked at run time, so a plan that
needs one fails with a sentence instead of a ``KeyError`` in the build process.
"""

from __future__ import annotations

OLDEST = (10, 8)  # pyproject's gpu extra: tensorrt>=10.8,<12
NEWEST_MAJOR = 11

# API members newer than OLDEST: (name as written in the spec's terms, first version).
FEATURES: dict[str, tuple[str, tuple[int, int]]] = {
    "SAME_COMPUTE_CAPABILITY": ("HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY", (10, 9)),
}


def parse(version: str) -> tuple[int, int]:
    major, _, rest = version.partition(".")
    minor = rest.partition(".")[0]
    return int(major), int(minor or 0)


def unsupported(version: str) -> str | None:
    """Why this TensorRT cannot be used (None: it can)."""
    try:
        found = parse(version)
    except ValueError:
        return f"TensorRT '{version}' has a version this builder cannot read"
    if found < OLDEST:
        return f"TensorRT {version} is older than {OLDEST[0]}.{OLDEST[1]}, the oldest this builder supports"
    if found[0] > NEWEST_MAJOR:
        return f"TensorRT {version} is newer than this builder knows (TensorRT 10.8 to {NEWEST_MAJOR}.x)"
    return None


def unavailable(version: str) -> list[str]:
    """The API members this (supported) version lacks, each with the version that added it."""
    found = parse(version)
    return [f"{api} (from {v[0]}.{v[1]})" for api, v in FEATURES.values() if found < v]


def missing_feature(version: str, member: str) -> str | None:
    """Why ``member`` (a HardwareCompatibilityLevel name, say) is not in this version, or None."""
    feature = FEATURES.get(member)
    if feature is None or parse(version) >= feature[1]:
        return None
    api, first = feature
    return f"{api} needs TensorRT {first[0]}.{first[1]} or newer; this machine has {version}"

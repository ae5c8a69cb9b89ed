#!/usr/bin/env bash
# Idempotent environment set-up for mmf_uvlp: `make setup` runs this.
#
# 1. a virtual environment in $VENV (default .venv)
# 2. torch 2.13.0, CPU build (first, so nothing pulls a CUDA build)
# 3. the pinned modern libraries of requirements.txt
# 4. MMF 1.0.0rc10 and torchvision 0.28.0 with --no-deps (their pins cannot resolve)
# 5. MMF's yaml configs, which the rc9/rc10 distributions lack, taken from the
#    rc7 source distribution on the package index (never committed here)
# 6. this project, editable, with its compatibility hook (mmf_uvlp_compat.pth)
#
# A stamp file records the inputs; an unchanged environment is left alone.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
TORCH_VERSION=2.13.0
MMF_VERSION=1.0.0rc10
MMF_CONFIGS_FROM=1.0.0rc7
TORCHVISION_VERSION=0.28.0

stamp="$VENV/.setup-stamp"
want=$(cat requirements.txt pyproject.toml tools/setup_env.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VENV/bin/python" -c "import mmf" 2>/dev/null; then
    echo "setup: environment $VENV is up to date"
    exit 0
fi

start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# pip's notes about local index folders absent on this machine are dropped;
# its exit status is kept.
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored" >&2); }

echo "setup: torch $TORCH_VERSION (CPU)"
pip install -q "torch==$TORCH_VERSION"
echo "setup: pinned libraries (requirements.txt)"
pip install -q -r requirements.txt "torch==$TORCH_VERSION"
echo "setup: mmf $MMF_VERSION and torchvision $TORCHVISION_VERSION (--no-deps)"
pip install -q --no-deps "mmf==$MMF_VERSION" "torchvision==$TORCHVISION_VERSION"

site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
if [ ! -f "$site/mmf/configs/defaults.yaml" ] || [ ! -d "$site/mmf/projects" ]; then
    echo "setup: MMF yaml configs from the mmf $MMF_CONFIGS_FROM source distribution"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    pip download -q --no-deps --no-binary :all: -d "$tmp" "mmf==$MMF_CONFIGS_FROM"
    tar -xzf "$tmp/mmf-$MMF_CONFIGS_FROM.tar.gz" -C "$tmp"
    rm -rf "$site/mmf/configs" "$site/mmf/projects"
    cp -r "$tmp/mmf-$MMF_CONFIGS_FROM/mmf/configs" "$site/mmf/configs"
    cp -r "$tmp/mmf-$MMF_CONFIGS_FROM/projects" "$site/mmf/projects"
fi

echo "setup: mmf_uvlp (editable)"
pip install -q --no-deps -e .

HF_HUB_OFFLINE=1 "$VENV/bin/python" -m mmf_uvlp.doctor --quiet
echo "$want" > "$stamp"
echo "setup: done in $(( $(date +%s) - start ))s; venv size $(du -sh "$VENV" | cut -f1)"

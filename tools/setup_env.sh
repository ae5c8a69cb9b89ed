#!/usr/bin/env bash
# Idempotent environment set-up for mmf_uvlp: `make setup` runs this (docs/install.md).
#
# 1. a virtual environment in $VENV (default .venv), built by $PYTHON (default python3);
#    with TORCH=system it sees $PYTHON's site-packages (--system-site-packages)
# 2. torch 2.13.0, first, so that nothing else pulls another build; TORCH chooses which:
#      auto (default)  cuda when `nvidia-smi -L` lists a GPU, else cpu
#      cuda            the CUDA build: PyPI's (CUDA 13.0), or TORCH_INDEX's
#      cpu             PyTorch's CPU build, 2.13.0+cpu (the configured indexes, else
#                      TORCH_CPU_INDEX); PyPI's 2.13.0 where none exists (macOS)
#      system          keep the torch $PYTHON already has (a cluster module, a container);
#                      nothing later may replace it
# 3. the pinned modern libraries of requirements.txt
# 4. MMF 1.0.0rc10 and torchvision 0.28.0 with --no-deps (their pins cannot resolve)
# 5. MMF's yaml configs, which the rc9/rc10 distributions lack, taken from the
#    rc7 source distribution on the package index (never committed here)
# 6. this project, editable, with its compatibility hook (mmf_uvlp_compat.pth)
#
# WHEELHOUSE=dir installs everything from that folder (`make wheelhouse` writes it) with
# pip --no-index: no index, no network. SETUP_PLAN=1 prints what would be installed, and
# installs nothing.
#
# A stamp file records the inputs; an unchanged environment is left alone.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
TORCH=${TORCH:-auto}
TORCH_INDEX=${TORCH_INDEX:-}
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
WHEELHOUSE=${WHEELHOUSE:-}
TORCH_VERSION=2.13.0
MMF_VERSION=1.0.0rc10
MMF_CONFIGS_FROM=1.0.0rc7
TORCHVISION_VERSION=0.28.0

fail() { echo "setup: error: $*" >&2; exit 2; }

if [ -n "$WHEELHOUSE" ]; then
    [ -d "$WHEELHOUSE" ] || fail "WHEELHOUSE=$WHEELHOUSE is not a folder (make wheelhouse writes one)"
    WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
    [ -f "$WHEELHOUSE/torch-build" ] || fail "$WHEELHOUSE has no torch-build file: not a folder written by make wheelhouse"
fi

# --------------------------------------------------------------- which torch
gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
fi
case "$TORCH" in
    auto)
        if [ -n "$WHEELHOUSE" ]; then
            mode=$(cat "$WHEELHOUSE/torch-build")
            why="the wheelhouse's torch build"
            if [ "$mode" = cpu ] && [ "${gpus:-0}" -gt 0 ]; then
                echo "setup: warning: nvidia-smi lists $gpus GPU(s) but $WHEELHOUSE holds the CPU torch" >&2
            fi
        elif [ "${gpus:-0}" -gt 0 ]; then
            mode=cuda; why="nvidia-smi lists $gpus GPU(s)"
        else
            mode=cpu; why="no NVIDIA GPU listed by nvidia-smi"
        fi ;;
    cuda|cpu|system) mode=$TORCH; why="TORCH=$TORCH" ;;
    *) fail "TORCH=$TORCH: expected auto, cuda, cpu or system" ;;
esac
if [ -n "$WHEELHOUSE" ] && [ "$mode" != system ] && [ "$mode" != "$(cat "$WHEELHOUSE/torch-build")" ]; then
    fail "TORCH=$mode but $WHEELHOUSE holds the $(cat "$WHEELHOUSE/torch-build") torch (make wheelhouse TORCH=$mode)"
fi
case "$mode" in
    cpu) torch_spec="torch==$TORCH_VERSION+cpu" ;;
    cuda) torch_spec="torch==$TORCH_VERSION" ;;
    system) torch_spec="" ;;
esac

pip_source=()
if [ -n "$WHEELHOUSE" ]; then
    pip_source=(--isolated --no-index --find-links "$WHEELHOUSE")
    # pip's build subprocesses (source distributions) read no configuration either
    export PIP_CONFIG_FILE=/dev/null
    unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL
fi

if [ -n "${SETUP_PLAN:-}" ]; then
    echo "venv: $VENV$([ "$mode" = system ] && echo " (--system-site-packages of $PY)")"
    echo "torch: ${torch_spec:-the torch of $PY} ($mode: $why)"
    source_text="the indexes pip is configured with"
    [ -n "$WHEELHOUSE" ] && source_text="${pip_source[*]}"
    echo "index: $source_text${TORCH_INDEX:+; torch also from $TORCH_INDEX}"
    exit 0
fi

stamp="$VENV/.setup-stamp"
want=$( (cat requirements.txt requirements-build.txt pyproject.toml tools/setup_env.sh; echo "$mode") \
    | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VENV/bin/python" -c "import mmf" 2>/dev/null; then
    echo "setup: environment $VENV is up to date"
    exit 0
fi

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
    if [ "$mode" = system ]; then
        "$PY" -c "import torch" 2>/dev/null || fail "TORCH=system: $PY has no torch to keep (set PYTHON to the interpreter that has it)"
        "$PY" -m venv --system-site-packages "$VENV"
        "$VENV/bin/python" -c "import torch" 2>/dev/null || fail "TORCH=system: the venv $PY made does not see its torch ($PY is itself a virtual environment?); set VENV to that environment to install into it"
    else
        "$PY" -m venv "$VENV"
    fi
elif [ "$mode" = system ] && ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    fail "TORCH=system: $VENV/bin/python cannot import torch (a venv made without --system-site-packages?); remove $VENV or choose another VENV"
fi
# pip's notes about local index folders that do not exist are dropped;
# its exit status is kept.
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored" >&2); }

keep=()  # what every later install must leave as it is
if [ "$mode" = system ]; then
    version=$("$VENV/bin/python" -c "import torch; print(torch.__version__)")
    echo "setup: torch $version kept ($why)"
    echo "torch==$version" > "$VENV/torch-constraint.txt"
    keep=(-c "$VENV/torch-constraint.txt")
else
    echo "setup: $torch_spec ($why)"
    torch_index=()
    [ -n "$TORCH_INDEX" ] && torch_index=(--extra-index-url "$TORCH_INDEX")
    if [ -n "$WHEELHOUSE" ] || [ "$mode" = cuda ] || [ -n "$TORCH_INDEX" ]; then
        pip install "${pip_source[@]}" "${torch_index[@]}" "$torch_spec"
    elif ! pip install "$torch_spec" 2>/dev/null; then
        if ! pip install "$torch_spec" --extra-index-url "$TORCH_CPU_INDEX"; then
            echo "setup: no $torch_spec for this platform; PyPI's torch==$TORCH_VERSION"
            torch_spec="torch==$TORCH_VERSION"
            pip install "$torch_spec"
        fi
    fi
    keep=("$torch_spec")
fi
built=$("$VENV/bin/python" -c "import torch; print(torch.__version__, torch.version.cuda or 'no CUDA')" 2>/dev/null)
if [ "$mode" = cuda ]; then
    case "$built" in *"no CUDA") fail "TORCH=cuda installed torch $built, a CPU build: another index served $torch_spec first (set TORCH_INDEX to a CUDA index)" ;; esac
    if [ "${gpus:-0}" -gt 0 ] && ! "$VENV/bin/python" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
        echo "setup: warning: torch $built cannot use the GPU: the NVIDIA driver may be older than its CUDA needs (TORCH_INDEX=https://download.pytorch.org/whl/cu126 picks an older CUDA)" >&2
    fi
fi
echo "setup: torch $built"

echo "setup: pinned libraries (requirements.txt)"
pip install "${pip_source[@]}" -r requirements.txt "${keep[@]}"
echo "setup: mmf $MMF_VERSION and torchvision $TORCHVISION_VERSION (--no-deps)"
if [ "$mode" = system ] && "$VENV/bin/python" -c "import torchvision" 2>/dev/null; then
    pip install "${pip_source[@]}" --no-deps "mmf==$MMF_VERSION"
else
    pip install "${pip_source[@]}" --no-deps "mmf==$MMF_VERSION" "torchvision==$TORCHVISION_VERSION"
fi

site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
if [ ! -f "$site/mmf/configs/defaults.yaml" ] || [ ! -d "$site/mmf/projects" ]; then
    echo "setup: MMF yaml configs from the mmf $MMF_CONFIGS_FROM source distribution"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    pip download "${pip_source[@]}" --no-deps --no-binary mmf -d "$tmp" "mmf==$MMF_CONFIGS_FROM"
    tar -xzf "$tmp/mmf-$MMF_CONFIGS_FROM.tar.gz" -C "$tmp"
    rm -rf "$site/mmf/configs" "$site/mmf/projects"
    cp -r "$tmp/mmf-$MMF_CONFIGS_FROM/mmf/configs" "$site/mmf/configs"
    cp -r "$tmp/mmf-$MMF_CONFIGS_FROM/projects" "$site/mmf/projects"
fi

echo "setup: mmf_uvlp (editable)"
pip install "${pip_source[@]}" --no-deps -e .

HF_HUB_OFFLINE=1 "$VENV/bin/python" -m mmf_uvlp.doctor --quiet
echo "$want" > "$stamp"
echo "setup: done in $(( $(date +%s) - start ))s; venv size $(du -sh "$VENV" | cut -f1)"

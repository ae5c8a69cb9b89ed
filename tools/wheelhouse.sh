#!/usr/bin/env bash
# Every file that `make setup WHEELHOUSE=dir` installs, downloaded on a connected machine into
# $WHEELHOUSE, for one Python version and platform (docs/install.md):
#
#   the pinned libraries (requirements.txt: the offline BERT, spaCy model and GloVe vectors
#   the demo uses included), torch 2.13.0 (TORCH=cpu: 2.13.0+cpu; TORCH=cuda: PyPI's CUDA
#   13.0 build with its nvidia-* runtime wheels; auto: cuda when nvidia-smi lists a GPU),
#   torchvision 0.28.0, MMF 1.0.0rc10 (source, plus a wheel built here), the mmf 1.0.0rc7
#   source distribution that holds MMF's yaml configs, and the build tools
#   (requirements-build.txt).
#
# WHEELHOUSE_PYTHON (X.Y) and WHEELHOUSE_PLATFORM (a pip platform tag, e.g.
# manylinux_2_28_x86_64) choose another target than the running interpreter's; source distributions
# then stay sources, built on the target (mmf needs a C compiler there).
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELHOUSE=${WHEELHOUSE:?set WHEELHOUSE to the folder to write}
TORCH=${TORCH:-auto}
TORCH_INDEX=${TORCH_INDEX:-}
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
TORCH_VERSION=2.13.0
MMF_VERSION=1.0.0rc10
MMF_CONFIGS_FROM=1.0.0rc7
TORCHVISION_VERSION=0.28.0

case "$TORCH" in
    auto)
        if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
            build=cuda
        else
            build=cpu
        fi ;;
    cpu|cuda) build=$TORCH ;;
    *) echo "wheelhouse: error: TORCH=$TORCH: expected auto, cpu or cuda" >&2; exit 2 ;;
esac

target=()
cross=""
if [ -n "${WHEELHOUSE_PYTHON:-}${WHEELHOUSE_PLATFORM:-}" ]; then
    version=${WHEELHOUSE_PYTHON:-$("$PY" -c "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')")}
    platform=${WHEELHOUSE_PLATFORM:-$("$PY" -c "import sysconfig; print(sysconfig.get_platform().replace('-', '_').replace('.', '_'))")}
    target=(--python-version "$version" --platform "$platform" --implementation cp --abi "cp${version/./}")
    cross=" for Python $version on $platform"
fi

mkdir -p "$WHEELHOUSE"
pip() { "$PY" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored" >&2); }
get() { pip download -d "$WHEELHOUSE" "${target[@]}" "$@"; }

echo "wheelhouse: pinned libraries and build tools$cross"
get --no-deps -r requirements.txt -r requirements-build.txt
echo "wheelhouse: torch $TORCH_VERSION ($build)"
torch_index=()
[ -n "$TORCH_INDEX" ] && torch_index=(--extra-index-url "$TORCH_INDEX")
if [ "$build" = cpu ]; then
    get --only-binary=:all: -c requirements.txt -c requirements-build.txt "${torch_index[@]}" "torch==$TORCH_VERSION+cpu" 2>/dev/null \
        || get --only-binary=:all: -c requirements.txt -c requirements-build.txt --extra-index-url "$TORCH_CPU_INDEX" "torch==$TORCH_VERSION+cpu"
else
    get --only-binary=:all: -c requirements.txt -c requirements-build.txt "${torch_index[@]}" "torch==$TORCH_VERSION"
fi
echo "wheelhouse: torchvision $TORCHVISION_VERSION, mmf $MMF_VERSION and the configs of mmf $MMF_CONFIGS_FROM"
get --no-deps --only-binary=:all: "torchvision==$TORCHVISION_VERSION"
pip download -d "$WHEELHOUSE" --no-deps --no-binary mmf "mmf==$MMF_VERSION"
pip download -d "$WHEELHOUSE" --no-deps --no-binary mmf "mmf==$MMF_CONFIGS_FROM"
if [ -z "$cross" ]; then
    echo "wheelhouse: wheels of the source distributions (for this Python and platform)"
    sources=$(ls "$WHEELHOUSE"/*.tar.gz | grep -v "mmf-$MMF_CONFIGS_FROM.tar.gz")
    pip wheel --no-deps -w "$WHEELHOUSE" $sources
fi
if [ "${EXTRACT:-}" = 1 ]; then
    # the feature extractor's environment (tools/setup_extract.sh): its torch, what detectron2
    # needs, and a detectron2 wheel from DETECTRON2 (a folder; default ../shared/wheels/detectron2)
    echo "wheelhouse: the extractor's torch 2.14.1, torchvision 0.29.1, requirements-extract.txt, detectron2"
    get --only-binary=:all: "torch==2.14.1" "torchvision==0.29.1"
    get -r requirements-extract.txt -c requirements.txt
    d2=${DETECTRON2:-../shared/wheels/detectron2}
    [ -d "$d2" ] || { echo "wheelhouse: error: DETECTRON2=$d2 is not a folder holding a detectron2 wheel (docs/install.md)" >&2; exit 2; }
    cp "$d2"/detectron2-*.whl "$WHEELHOUSE"/
fi
echo "$build" > "$WHEELHOUSE/torch-build"
echo "wheelhouse: $(ls "$WHEELHOUSE" | grep -c -v torch-build) files, $(du -sh "$WHEELHOUSE" | cut -f1) in $WHEELHOUSE"

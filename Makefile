# envaudit: two entry points for a fresh machine.
#   make audit GPU=GPU-<uuid>   bootstrap, then audit every solution and merge the report
#   make test                   bootstrap, then lint, type-check and run the test suite
# Options of `make audit`: GPU=A[,B...]  SOLUTIONS="s1 s2"  RUNTIME=docker|podman|local|host
#   OVER=RECIPE (docker: images over an imported machine stack, e.g. the GPU machine's own)
# `make build SOLUTION=S` builds the image of S's environment (S may name an env).

SHELL := /bin/bash
PY := .venv/bin/python
VENV_STAMP := .venv/.installed
export UV_PYTHON_DOWNLOADS := never
# The CPU build of torch that these machines carry locally; uv ignores pip's config.
LOCAL_WHEELS := $(wildcard /opt/wheels)
ifneq ($(LOCAL_WHEELS),)
export UV_FIND_LINKS := $(LOCAL_WHEELS)
endif

.PHONY: bootstrap test lint typecheck check-inputs check-locks audit build report dataset schemas settings clean

bootstrap: $(VENV_STAMP)

# FlashInfer-Bench itself, for the interop tests (tests/report/test_flashinfer_bench.py): its data
# models and TraceSet need none of its CUDA dependencies (flashinfer-python); apache-tvm-ffi builds
# its default binding's solutions (tests/harness/test_native.py, on the CPU).
FLASHINFER_BENCH := flashinfer-bench==0.1.2 docstring-parser==0.18.0 apache-tvm-ffi==0.1.11

$(VENV_STAMP): pyproject.toml Makefile
	@command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
	uv venv --quiet --allow-existing --python python3 .venv
	uv pip install --quiet --compile-bytecode --python $(PY) -e '.[dev]'
	uv pip install --quiet --python $(PY) --no-deps $(FLASHINFER_BENCH)
	@touch $@

lint: bootstrap
	.venv/bin/ruff format --check src tests scripts benchmarks
	.venv/bin/ruff check src tests scripts benchmarks

typecheck: bootstrap
	.venv/bin/mypy

check-inputs: bootstrap
	.venv/bin/envaudit check-inputs --data-root workloads

# Every shipped lock must still describe its env.toml and carry an intact closure hash (offline).
check-locks: bootstrap
	.venv/bin/envaudit lock --all --check

test: lint typecheck check-inputs check-locks
	.venv/bin/pytest -q --durations=25

schemas: bootstrap
	$(PY) -m envaudit.schema.jsonschema docs/schema

# docs/settings.md: every ENVAUDIT_* variable, from src/envaudit/settings.py.
settings: bootstrap
	$(PY) -m envaudit.settings docs/settings.md

dataset: bootstrap
	$(PY) -m scripts.sample_dataset.build workloads

# With GPU=..., every solution runs its `dev` suite on that GPU in the environment it declares.
# Without it, every solution runs its `smoke` suite on the CPU in the torch-cpu lock (the CPU
# stand-in for the CUDA locks the solutions declare: each line records both), and GPU-only
# solutions read UNSUPPORTED_DEVICE. The runtime is docker when an engine answers, else a local
# uv environment; the audit fetches and builds what is missing first.
comma := ,
AUDIT_WHERE = $(if $(GPU),$(foreach g,$(subst $(comma), ,$(GPU)),--gpu $(g)),--device cpu --env torch-cpu)
audit: bootstrap check-inputs
	.venv/bin/envaudit audit $(AUDIT_WHERE) $(foreach s,$(SOLUTIONS),--solution $(s)) \
		$(if $(RUNTIME),--runtime $(RUNTIME)) $(if $(OVER),--over $(OVER)) --out results/audit; \
	status=$$?; .venv/bin/envaudit merge results/audit/results.jsonl --out results/audit/report; \
	exit $$status

build: bootstrap
	.venv/bin/envaudit build $(if $(SOLUTION),--solution $(SOLUTION),--all)

# The committed report: every solution on one H200 model, in containers (docs/audit/README.md):
# the all suite of the 34 torch-2.11-cu130 solutions (record/), FlashMLA's and NATTEN's all
# suites, and the dev suite of the library solutions. Where a solution has lines of both suites,
# merge keeps the newest per workload; earlier lines are kept as history under docs/results/.
# DeepGEMM was run on the lent H100 only (in containers over the imported machine stack, beside
# the torch solutions of its definitions): the report shows it under that GPU model, apart from
# the H200's; the host-runtime run of the same day (deepgemm-all.jsonl) is history.
REPORT_LINES := docs/results/h200/libraries/audit-dev.jsonl docs/results/h200/libraries/tilelang-0.1.12.jsonl \
	docs/results/h200/flashmla/flashmla-13.1.jsonl docs/results/h200/flashmla/flashmla-13.3.jsonl \
	docs/results/h200/gdn-strict-diagnostic.jsonl \
	docs/results/h200/natten/natten.jsonl docs/results/h200/natten/torch-flex.jsonl \
	docs/results/h200/record/containers-all.jsonl \
	docs/results/h100/deepgemm/containers-all.jsonl
report: bootstrap
	.venv/bin/envaudit merge $(REPORT_LINES) --out docs/report
	scripts/report-screenshot.sh docs/report/report.html docs/report-screenshot.png

clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache

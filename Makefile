# kubecua: two commands matter.
#   make demo   the main job: a TrainingRun spec run locally (tiny model, CPU, Xvfb desktops)
#   make test   all set-up (apt, Python envs, Go builds, images) and the whole suite
# Each component adds its own targets in <component>/make.mk; this file only wires them.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
include hack/versions.env
export KUBECUA_CACHE ?= $(HOME)/.cache/kubecua
export UV_CACHE_DIR ?= $(KUBECUA_CACHE)/uv
export UV_PYTHON ?= 3.11
export UV_PYTHON_DOWNLOADS := never
# Hard links into the uv cache (uv falls back to copying across file systems): a clone's venvs
# then cost almost no disk; copied, they were 8 GB a clone (the trainer's alone 5 GB).
export UV_LINK_MODE := hardlink
UV := $(KUBECUA_CACHE)/bin/uv-$(UV_VERSION)/uv
export UV
BIN := $(KUBECUA_CACHE)/bin
export PATH := $(BIN):$(PATH)
# Every suite's pytest prints its 25 slowest steps (setup, call, teardown) of 1 s or more, so a CI
# log shows where make test's time goes. Set here, not in each pyproject.toml: the images copy
# those files into the layer that installs their dependencies, and a change there rebuilds it.
export PYTEST_ADDOPTS ?= --durations=25 --durations-min=1

# $(eval $(call python-project,NAME,DIR)) gives a uv project in DIR (pyproject.toml + uv.lock):
#   NAME-env   uv sync --locked into DIR/.venv (fast when already in sync)
#   lint-NAME  ruff format --check, ruff check and mypy, from that project's own dev group
# mypy keeps its cache in $(MYPY_CACHE)/NAME, beside the other caches, not in the clone: a clean
# clone's cold check took 2 min of CPU for the trainer alone (torch, transformers) and about 3 min
# for all, warm a few seconds (2026-11-28, this machine). Incremental mode can disagree with a cold
# run (a stale "unused type: ignore" came once from another tree's cache), so a failure is checked
# again without the cache and only that verdict counts.
MYPY_CACHE ?= $(KUBECUA_CACHE)/mypy
define python-project
.PHONY: $(1)-env lint-$(1)
$(1)-env: setup-uv
	cd $(2) && $$(UV) sync --locked --quiet
lint-$(1): $(1)-env
	cd $(2) && .venv/bin/ruff format --check . && .venv/bin/ruff check . \
		&& { .venv/bin/mypy --cache-dir $(MYPY_CACHE)/$(1) \
			|| { echo "lint-$(1): mypy failed with the shared cache; checking again without it"; \
				.venv/bin/mypy --cache-dir /dev/null; }; }
SETUP_TARGETS += $(1)-env
LINT_TARGETS += lint-$(1)
endef

# The tiny model the trainer's tests, the demo and e2e use (its rule: trainer/make.mk). Rebuilt when
# its builder's content changes (a stamp named by its hash), not its mtime: a clean clone's files
# are all new, and the cache is shared between clones.
TINY_MODEL := $(KUBECUA_CACHE)/models/tiny-qwen2_5_vl
TINY_MODEL_STAMP := $(TINY_MODEL)/.inputs-$(shell sha256sum trainer/kubecua_trainer/tiny_models.py | cut -c1-16)

# Filled in by the component fragments below.
SETUP_TARGETS :=
TEST_TARGETS :=
LINT_TARGETS :=
include $(sort $(wildcard */make.mk */*/make.mk))

.PHONY: help setup setup-apt setup-uv setup-go setup-addons lint test demo images cluster-up cluster-down clean-cache
help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

setup-apt: ## install Debian packages named in hack/apt/*.txt, or in APT_LISTS (make demo: its own); skipped when unchanged
	hack/setup-apt.sh $(APT_LISTS)

setup-uv: ## install the pinned uv into the cache
	hack/setup-uv.sh

setup-go: ## build the control plane, kwok and helm from the Go module proxy (cached)
	hack/build-control-plane.sh

setup-addons: ## build Kueue, prometheus-operator and metrics-server from the Go module proxy (cached)
	hack/build-cluster-addons.sh

setup: setup-apt setup-uv setup-go setup-addons $(SETUP_TARGETS) ## everything the suite needs

lint: setup-uv $(LINT_TARGETS) lint-paths lint-locks lint-apt-targets ## ruff format check, ruff lint and mypy per component; named paths exist; one version of each library; desktop-only targets install only the demo's packages

.PHONY: lint-paths lint-locks lint-apt-targets
lint-apt-targets: ## make demo and make bench-learning install only the demo's Debian packages (make -n)
	python3 hack/check-apt-targets.py --self-test
	python3 hack/check-apt-targets.py

lint-locks: ## every uv.lock resolves a shared library to the same version
	python3 hack/check-locks.py --self-test
	python3 hack/check-locks.py

lint-paths: ## every repository path named in the docs, examples, chart and code comments exists
	python3 hack/check-paths.py --self-test
	python3 hack/check-paths.py

# On a fresh machine the set-up is most of the cost. apt comes first (everything needs it); then
# the Go builds (CPU-bound) run beside the venv downloads and image builds (network and disk), three
# jobs at a time (their output interleaves: the build scripts prefix their lines; make's
# --output-sync would hold a 15-minute build's lines back until it ends). The suites then run one
# at a time: the GUI ones are sensitive to load.
PREPARE_TARGETS = setup sandbox-env node-images $(TINY_MODEL_STAMP)
.PHONY: prepare
prepare: setup-apt ## all of make test's set-up, in parallel where it can be (apt first)
	$(MAKE) --no-print-directory -j3 $(PREPARE_TARGETS)

# Each suite runs in its own make, so the log gives each its wall time (its prerequisites' cached
# checks, a few seconds, run again each time) and a table of them at the end; with make -k the
# others still run after a failure, as they did in one make. The suites run in two lanes at once
# (hack/run-suites.sh): TEST_BESIDE's one after another, beside the others one after another. Most
# of a suite's time is waiting (apps starting, pods and VMs coming up, apiserver watches): the 2
# cores were 58-70% idle during test-operator and test-desktop alone (vmstat, 2026-11-29). The
# lanes split by what a suite runs on this host: the first holds the suites whose desktops run
# here (Xvfb sessions as root or the one desktop account, sudo writes outside their homes:
# they stay one at a time), the second those whose desktops run in containers, pods or VMs, or
# that start none. test-desktop's `pkill chrome` runs as root and would kill any Chrome on the
# machine: it runs while only test-operator (no desktop) runs beside it. TEST_LAST's suites run
# after both lanes, with nothing beside them: the trainer's learning check
# (trainer/tests/test_learning_check.py) failed once with e2e's end beside it (7 of 15 screens up,
# 13 asked) and passed alone on the same tree (2026-11-29).
TEST_BESIDE ?= test-operator test-sandbox-image test-vm test-e2e
TEST_LAST ?= test-trainer
test: ## set up (see prepare), lint, and run every suite
	@TEST_ORDER="$(TEST_TARGETS)" MAKE="$(MAKE)" hack/run-suites.sh \
		$(if $(findstring k,$(firstword -$(MAKEFLAGS))),1,0) "$(filter $(TEST_LAST),$(TEST_TARGETS))" \
		"$(filter-out $(TEST_BESIDE) $(TEST_LAST),$(TEST_TARGETS))" "$(filter $(TEST_BESIDE),$(TEST_TARGETS))"

cluster-up: setup-apt setup-go tests-env $(if $(REAL_NODE),setup-node node-images) ## start a local control plane with kwok nodes (REAL_NODE=1: and a real node); prints the kubeconfig
	@$(TESTS_PY) -m kubecua_testkit.cluster up $(if $(REAL_NODE),--real-node)

cluster-down: ## stop the local control plane
	@$(TESTS_PY) -m kubecua_testkit.cluster down

images: setup-apt ## build every container image with podman from a debootstrap base
	hack/build-images.sh

clean-cache: ## remove $(KUBECUA_CACHE) (binaries, uv cache, base images)
	rm -rf "$(KUBECUA_CACHE)"

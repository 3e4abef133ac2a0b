# The kubecua.dev API (api/, package kubecua_api): the models the CRDs, docs/api.md's field tables,
# the trainer's spec and the operator's names come from.
$(eval $(call python-project,api,api))
TEST_TARGETS += test-api
.PHONY: test-api crds check-crds
LINT_TARGETS += check-crds

test-api: api-env ## the API models: defaults, round trips, the CRD generator
	cd api && .venv/bin/pytest -q

crds: api-env ## regenerate crds/, the chart's copy and docs/api.md's field tables from api/
	cd api && .venv/bin/python -m kubecua_api.crdgen

check-crds: api-env ## fail when crds/, the chart's CRDs or docs/api.md's tables are stale
	cd api && .venv/bin/python -m kubecua_api.crdgen --check

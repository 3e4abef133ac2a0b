# Test kit (control-plane fixture) and the cross-component end-to-end suite.
$(eval $(call python-project,tests,tests))
TESTS_PY := tests/.venv/bin/python
TEST_TARGETS += test-e2e
.PHONY: test-e2e
# The chart's own test files run under test-charts; everything else in e2e/ runs here.
test-e2e: tests-env setup-go sandbox-env operator-env trainer-env
	cd tests && .venv/bin/pytest -q e2e $(addprefix --ignore=,$(CHART_TESTS))

# Test kit (control-plane fixture) and the cross-component end-to-end suite.
$(eval $(call python-project,tests,tests))
TESTS_PY := tests/.venv/bin/python
TEST_TARGETS += test-e2e
.PHONY: test-e2e
test-e2e: tests-env setup-go
	cd tests && .venv/bin/pytest -q e2e

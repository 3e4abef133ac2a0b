# Async client and wire models of the episode API (used by the trainer and the episode server).
$(eval $(call python-project,client,sandbox-image/client))
TEST_TARGETS += test-client
.PHONY: test-client
test-client: client-env
	cd sandbox-image/client && .venv/bin/pytest -q

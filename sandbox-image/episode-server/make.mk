# Episode server (:8000) of a sandbox, the local sandbox launcher, the offline task suite and the
# sandbox benchmark. `make sandbox-env` prepares everything a local sandbox needs.
$(eval $(call python-project,episode,sandbox-image/episode-server))
TEST_TARGETS += test-episode
EPISODE_PY := sandbox-image/episode-server/.venv/bin/python

.PHONY: sandbox-env test-episode bench-sandbox
sandbox-env: setup-apt desktop-env episode-env ## apt packages + desktop and episode venvs for local sandboxes

test-episode: sandbox-env ## episode server, task suite (reference/no-op/wrong) and launcher on real Xvfb desktops
	cd sandbox-image/episode-server && .venv/bin/pytest -q

bench-sandbox: sandbox-env ## JSON: step overhead, settle latency, screenshot encode, reset, OSWorld-style anchor
	$(EPISODE_PY) sandbox-image/bench/bench_sandbox.py

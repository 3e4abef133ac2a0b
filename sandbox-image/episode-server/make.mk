# Episode server (:8000) of a sandbox, the local sandbox launcher, the offline task suite and the
# sandbox benchmark. `make sandbox-env` prepares everything a local sandbox needs on a fresh
# machine: apt packages, both venvs, and OSWorld's chrome link (desktop-host).
$(eval $(call python-project,episode,sandbox-image/episode-server))
TEST_TARGETS += test-episode
EPISODE_PY := sandbox-image/episode-server/.venv/bin/python

.PHONY: sandbox-env test-episode test-sandbox-image bench-sandbox
sandbox-env: setup-apt desktop-env episode-env desktop-host ## apt packages, desktop and episode venvs, chrome link: local sandboxes

test-episode: sandbox-env ## episode server, task suite (reference/no-op/wrong) and launcher on real Xvfb desktops
	cd sandbox-image/episode-server && .venv/bin/pytest -q -m "not image"

# Not in TEST_TARGETS: a full image build takes ~10 min here (about a minute when cached).
test-sandbox-image: episode-env ## build the sandbox image, then run the episode API in it with podman
	hack/build-images.sh sandbox
	cd sandbox-image/episode-server && .venv/bin/pytest -q -m image

bench-sandbox: sandbox-env ## JSON: step overhead, settle, screenshot encode, reset, container cold start, OSWorld anchor
	$(EPISODE_PY) sandbox-image/bench/bench_sandbox.py

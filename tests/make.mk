# Test kit (control-plane fixture, real node) and the cross-component end-to-end suite.
$(eval $(call python-project,tests,tests))
TESTS_PY := tests/.venv/bin/python
SETUP_TARGETS += setup-node
TEST_TARGETS += test-e2e
.PHONY: test-e2e setup-node node-images

setup-node: setup-apt setup-go ## a real node: kubelet, kube-proxy, pause image (cached by version); containerd, CNI from apt
	hack/build-node.sh

# The images tests/e2e/test_real_node_*.py runs on the real node (each skipped when its inputs
# are unchanged). The trainer image (CUDA torch from PyPI, 5.5 GB: about 16 min to build and 3 to
# import on the loaded 2-core machine) only with REAL_NODE_TRAINER=1, to keep a fresh `make test`
# in its time budget; without it the journey's training, suspend/resume and Prometheus tests skip,
# saying so. `make images` builds it too.
node-images: setup-apt
	hack/build-images.sh operator sandbox $(if $(REAL_NODE_TRAINER),trainer)

# The chart's own test files run under test-charts; everything else in e2e/ runs here.
# The tiny model's rule is in trainer/make.mk (included after this file, hence the spelled path).
test-e2e: tests-env setup-go setup-node node-images sandbox-env operator-env trainer-env \
		$(KUBECUA_CACHE)/models/tiny-qwen2_5_vl/config.json
	cd tests && .venv/bin/pytest -q e2e $(addprefix --ignore=,$(CHART_TESTS))

# Test kit (control-plane fixture, real node) and the cross-component end-to-end suite.
$(eval $(call python-project,tests,tests))
TESTS_PY := tests/.venv/bin/python
SETUP_TARGETS += setup-node
TEST_TARGETS += test-e2e
.PHONY: test-e2e setup-node node-images

setup-node: setup-apt setup-go ## a real node: kubelet, kube-proxy, pause image (cached by version); containerd, CNI from apt
	hack/build-node.sh

# The images tests/e2e/test_real_node_*.py runs on the real node, each skipped when its inputs are
# unchanged. The trainer image is the one the chart ships (CUDA torch: PyPI has no CPU build of
# torch for x86_64 Linux and PyTorch's own index cannot be reached here); its 4 GB of wheels come
# from the uv cache that trainer-env filled, so it builds in minutes, not the 16 of a download.
# The tasks image is the base of test_real_node_task_verification.py's verifier image.
node-images: setup-apt trainer-env
	hack/build-images.sh operator sandbox trainer tasks

# The chart's own test files run under test-charts; everything else in e2e/ runs here.
# vm-disk and vm-runner: test_real_node_vm_pool.py boots the VM disk in a pod of that image.
# The tiny model's rule is in trainer/make.mk; its stamp's name is set in the top Makefile.
test-e2e: tests-env setup-go setup-addons setup-node node-images sandbox-env operator-env trainer-env \
		$(TINY_MODEL_STAMP) vm-disk vm-runner
	cd tests && .venv/bin/pytest -q e2e $(addprefix --ignore=,$(CHART_TESTS))

# Every make bench-* target, as a user runs it, in its small smoke mode (tests/bench/): each runs
# to the end and prints its figures, which must be present and sane. About 6 min on this machine.
TEST_TARGETS += test-bench-smoke
.PHONY: test-bench-smoke
test-bench-smoke: tests-env ## every make bench-* target in its smoke mode: runs to the end, sane JSON
	cd tests && .venv/bin/pytest -q -s bench

# Episode server (:8000) of a sandbox, the local sandbox launcher, the offline task suite's test and
# the sandbox benchmark (the suite's generators: sandbox-image/tasks/make.mk). `make sandbox-env`
# prepares everything a local sandbox needs on a fresh machine: apt packages, both venvs,
# OSWorld's chrome link (desktop-host) and, as root, the unprivileged account its desktop runs as
# (desktop-account).
$(eval $(call python-project,episode,sandbox-image/episode-server))
TEST_TARGETS += test-episode
EPISODE_PY := sandbox-image/episode-server/.venv/bin/python

.PHONY: sandbox-env test-episode test-sandbox-image bench-sandbox
sandbox-env: setup-apt desktop-env episode-env desktop-host desktop-account ## apt packages, desktop and episode venvs, chrome link, desktop account: local sandboxes

test-episode: sandbox-env ## episode server, task suite (reference/no-op/wrong) and launcher on real Xvfb desktops
	cd sandbox-image/episode-server && .venv/bin/pytest -q -m "not image and not vm"

# The image in both run modes (full sandbox; `episode-server` against another container's
# desktop). hack/build-images.sh skips the build when the image's inputs are unchanged (label
# io.kubecua.inputs); otherwise podman's layer cache applies. Cost on the shared 2-core machine:
# a build without layer cache 2 min 43 s (quiet machine; about 10 min under heavy load), a code
# change ~45 s (layer cache), unchanged inputs 0.2 s; tests ~30 s.
TEST_TARGETS += test-sandbox-image
test-sandbox-image: episode-env ## build the sandbox image (if its inputs changed), then test it in podman
	hack/build-images.sh sandbox
	cd sandbox-image/episode-server && .venv/bin/pytest -q -m image

# Desktop VMs (docs/vm-desktops.md): the sandbox image as a bootable qcow2 plus its KubeVirt
# containerDisk image, cached by a hash of its inputs (hack/build-vm-disk.sh), and the VM runner
# (kubecua_episode.vm) booting it with qemu, snapshotting it and restoring it. Cost on the shared
# 2-core machine (qemu's emulator: its KVM runs no stock kernel): the disk about 4 min after a
# change of the sandbox image, 0.7 s unchanged; the tests (one boot, one rebuild) about 5 min.
.PHONY: vm-disk vm-containerdisk vm-runner test-vm bench-vm
vm-disk: setup-apt ## the desktop VM disk (qcow2, kernel, initramfs) from the sandbox image; cached by inputs
	hack/build-images.sh sandbox
	hack/build-vm-disk.sh >/dev/null
vm-containerdisk: vm-disk ## the VM disk as a KubeVirt containerDisk image, localhost/kubecua/sandbox-vm-disk:dev
	hack/build-vm-disk.sh --containerdisk >/dev/null
vm-runner: ## the image of a VM sandbox's pod (desktop.vm): the sandbox image plus qemu, localhost/kubecua/sandbox-vm-runner:dev
	hack/build-images.sh sandbox
	hack/build-vm-runner.sh
TEST_TARGETS += test-vm
test-vm: episode-env vm-disk ## boot the desktop VM with qemu: token, snapshot restore fidelity, quarantine and rebuild
	cd sandbox-image/episode-server && KUBECUA_VM_DISK_DIR=$$(../../hack/build-vm-disk.sh 2>/dev/null) \
		.venv/bin/pytest -q -m vm tests/test_vm.py
bench-vm: sandbox-env vm-disk ## JSON: VM cold boot, snapshot restore vs container reset, memory per idle VM
	$(EPISODE_PY) sandbox-image/bench/bench_vm.py --disk-dir $$(hack/build-vm-disk.sh 2>/dev/null) $(BENCH_ARGS)

bench-sandbox: sandbox-env ## JSON: step overhead, settle, screenshot encode, reset, container cold start, OSWorld anchor
	$(EPISODE_PY) sandbox-image/bench/bench_sandbox.py $(BENCH_ARGS)

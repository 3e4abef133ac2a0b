# The image of a VM sandbox's pod (the pod backend's `desktop.vm` mode): the sandbox image plus
# qemu. Its pod runs two containers from it: `python -m kubecua_episode.vm` (boots the VM disk on
# a copy-on-write overlay, snapshots it, restores it on request) and the episode server in
# `episode-server` mode, pointed at the VM. A thin layer on the sandbox image rather than qemu in
# the sandbox image's own list: container sandboxes do not carry it, and the VM disk (built from
# the sandbox image) does not either. hack/build-vm-disk.sh --runner builds it.
ARG BASE=localhost/kubecua/sandbox:dev
FROM ${BASE}
USER root
# seabios and ipxe-qemu: the firmware and virtio-net option ROM qemu loads even for direct
# kernel boot (they are only Recommends of qemu-system-x86).
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends qemu-system-x86 qemu-utils seabios ipxe-qemu \
 && rm -rf /var/lib/apt/lists/*
# The episode server's code as of this tree (its dependencies are the sandbox image's, locked):
# a code change rebuilds this layer in seconds, not the sandbox image and the VM disk from it.
COPY sandbox-image/episode-server/ /opt/kubecua/episode-server/
RUN --mount=type=secret,id=ca \
    if [ -f /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi \
 && cd /opt/kubecua/episode-server \
 && /opt/uv/bin/uv sync --locked --no-dev --no-editable --quiet
USER user

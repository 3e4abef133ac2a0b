"""Desktop VMs: a desktop disk booted with qemu on a copy-on-write overlay, reset from a memory
snapshot (docs/vm-desktops.md). The episode server reaches the guest's desktop server (:5000)
exactly as it reaches a KubeVirt VM's: `python -m kubecua_episode --remote` with
KUBECUA_DESKTOP_URL set to the runner's forwarded address."""

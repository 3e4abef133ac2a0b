"""Test kit for kubecua: a real local Kubernetes control plane (kube-apiserver, etcd,
controller-manager, scheduler and kwok nodes, all built from source by hack/build-control-plane.sh)
and the pytest fixtures that hand it to tests."""

"""The pool test's local control plane (kubecua_testkit: a real kube-apiserver)."""

pytest_plugins = ["kubecua_testkit.fixtures"]

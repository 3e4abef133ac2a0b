// Wrapper module: builds kube-router from the Go module proxy for its network-policy controller
// alone (hack/build-node.sh; kubecua_testkit.node runs it with --run-firewall only).
module kubecua.dev/hack/kube-router

go 1.24.0

require github.com/cloudnativelabs/kube-router/v2 v2.1.0

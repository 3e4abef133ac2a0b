// Wrapper module: builds prometheus-operator's cmd/operator from the Go module proxy (its own
// go.mod replaces its API and client modules with local paths, which `go install` refuses), so
// the API and client modules are required here at the same version (hack/build-cluster-addons.sh).
module kubecua.dev/hack/prometheus-operator

go 1.24.0

require (
	github.com/prometheus-operator/prometheus-operator v0.85.0
	github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring v0.85.0
	github.com/prometheus-operator/prometheus-operator/pkg/client v0.85.0
)

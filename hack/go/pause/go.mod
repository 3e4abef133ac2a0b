module kubecua.dev/hack/pause

go 1.24.0

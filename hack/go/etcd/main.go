// Command etcd is a thin wrapper around etcdmain so that etcd builds with a plain `go build`
// from the module proxy (its own go.mod carries replace directives that `go install` refuses).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }

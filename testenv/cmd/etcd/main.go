// Command etcd is the etcd server at exactly the version k8s.io/apiserver requires, so the
// test control plane stores its data in the etcd that this Kubernetes release is tested with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

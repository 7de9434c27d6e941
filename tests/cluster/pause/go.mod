module kube-harness/tests/cluster/pause

go 1.24

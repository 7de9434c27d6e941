#!/usr/bin/env bash
# Storage for the test cluster: a default StorageClass `standard` and a pool of pre-made hostPath
# PersistentVolumes (the cluster has no dynamic provisioner; a PVC binds to a free PV of the pool).
# Each PV directory is mode 0777 so a non-root pod (the worker runs as 65532) can write, and the
# sub-directories the kubelet creates for subPath mounts inherit that mode. Test-cluster only: on
# kind the local-path provisioner does this job. Env: KH_PV_COUNT (default 128: the e2e suites together create about 70 claims, and a released PV is not reused).
# `storage.sh recycle`: makes every Released PV of the pool Available again (its directory emptied,
# its claimRef dropped), for benchmarks that create and delete more PVCs than the pool holds.
. "$(dirname "$0")/lib.sh"

if [[ ${1:-} == recycle ]]; then
  n=0
  while read -r pv phase dir; do
    [[ $phase == Released && -n $dir && $dir == "$KH_STATE/pv/"* ]] || continue
    find "$dir" -mindepth 1 -delete
    kh_kubectl patch pv "$pv" --type json -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null ||
      die "recycling PV $pv failed"
    n=$((n + 1))
  done < <(kh_kubectl get pv -l kubeharness.dev/test-pool=true \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.spec.hostPath.path}{"\n"}{end}')
  log "storage: $n released PVs made available again"
  exit 0
fi

count=${KH_PV_COUNT:-128}
root="$KH_STATE/pv"
mkdir -p "$root"
{
  cat <<'YAML'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
reclaimPolicy: Retain
YAML
  for i in $(seq -w 1 "$count"); do
    dir="$root/pv$i"
    mkdir -p "$dir" && chmod 0777 "$dir"
    cat <<YAML
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: kh-pv$i
  labels: {kubeharness.dev/test-pool: "true"}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: standard
  hostPath: {path: $dir, type: Directory}
YAML
  done
} | kh_kubectl apply -f - >/dev/null || die "creating the test PV pool failed"
log "storage: StorageClass standard (default) with $count hostPath PVs under $root"

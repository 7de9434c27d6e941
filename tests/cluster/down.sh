#!/usr/bin/env bash
# Tears down what up.sh started: the processes named in $KH_STATE/pids (never anything found by
# name), the pods' containers and their shims, mounts under $KH_STATE, the bridge, the iptables rules
# and sysctls changed for the cluster, the NetworkPolicy agent's NFQUEUE hook (network-policies.sh), and
# finally $KH_STATE itself. Safe to run repeatedly.
. "$(dirname "$0")/lib.sh"
. "$KH_CLUSTER_DIR/network-policies.sh"

[[ $(id -u) == 0 ]] || die "down.sh must run as root"
cluster_lock
if [[ ! -d $KH_STATE ]]; then
  log "no cluster state in $KH_STATE; nothing to do"
  exit 0
fi

# 0. Companions started beside the cluster (tests/cluster/kwok.sh, the peer's controller from
#    tests/cluster/peers/, Flux from tests/cluster/flux.sh): one left running must not fail the teardown.
for extra in kwok agent-sandbox source-controller kustomize-controller; do
  stop "$extra"
done

# 1. Let kubelet tear pods down properly (CNI DEL, volume unmounts) while it still runs; stop the
#    controllers first so nothing recreates them.
stop kube-controller-manager
stop kube-scheduler
if running kube-apiserver && running kubelet && running containerd; then
  log "deleting all pods"
  kh_kubectl delete pods --all -A --grace-period=1 --wait=false >/dev/null 2>&1 || true
  tasks_gone() { [[ -z $(kh_ctr tasks ls -q 2>/dev/null) ]]; }
  wait_until 40 "pod containers to stop" tasks_gone || log "some containers outlived pod deletion; killing them"
fi
stop kubelet
# The NetworkPolicy agent and its NFQUEUE hook (nftables table or iptables chain) go before
# kube-proxy's cleanup: with the agent gone, a hook left behind drops pod traffic.
netpol_stop
if running kube-proxy; then
  stop kube-proxy
fi
# kube-proxy removes the iptables rules it created.
mkdir -p "$KH_STATE/logs"
if [[ -x $KH_BIN/kube-proxy ]]; then
  "$KH_BIN/kube-proxy" --cleanup --v=0 >>"$(logfile kube-proxy-cleanup)" 2>&1 || log "kube-proxy --cleanup reported errors (log: $(logfile kube-proxy-cleanup))"
fi
stop kube-apiserver
stop etcd

# 2. Remaining containers: kill their tasks through containerd, then stop containerd and any shim
#    it left behind (each shim's pid is recorded in its bundle under our containerd state dir).
if running containerd; then
  for id in $(kh_ctr tasks ls -q 2>/dev/null); do
    kh_ctr tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  sleep 1
  for id in $(kh_ctr tasks ls -q 2>/dev/null); do kh_ctr tasks delete -f "$id" >/dev/null 2>&1 || true; done
  for id in $(kh_ctr containers ls -q 2>/dev/null); do kh_ctr containers rm "$id" >/dev/null 2>&1 || true; done
fi
stop containerd
while IFS= read -r f; do
  pid=$(cat "$f" 2>/dev/null || true)
  [[ $pid =~ ^[0-9]+$ ]] || continue
  if [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == *containerd-shim* ]]; then
    log "killing leftover shim $pid ($f)"
    kill -KILL "$pid" 2>/dev/null || true
  fi
done < <(find "$KH_STATE/containerd/state" -name shim.pid 2>/dev/null)

# 3. Mounts under our state (overlay snapshots, netns, kubelet volumes), deepest first.
for _ in 1 2 3; do
  mapfile -t mounts < <(findmnt -rn -o TARGET | grep -F "$KH_STATE/" | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-)
  ((${#mounts[@]} == 0)) && break
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
done

# 4. Cgroups kubelet created (cgroupfs driver, cgroup root "/"): empty after the pods are gone.
for ctl in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
  [[ -d $ctl ]] || continue
  find "$ctl" -depth -type d -exec rmdir {} + 2>/dev/null || log "could not remove cgroup $ctl (processes left inside?)"
done

# 5. Network: our egress chain, kubelet's chains, the bridge.
if iptables -w -n -L KH-EGRESS >/dev/null 2>&1; then
  iptables -w -D FORWARD -j KH-EGRESS 2>/dev/null || true
  iptables -w -F KH-EGRESS && iptables -w -X KH-EGRESS
fi
# kubelet's own chains (kube-proxy --cleanup leaves them), IPv4 and IPv6.
for ipt in iptables ip6tables; do
  for hook in INPUT OUTPUT; do
    while "$ipt" -w -D "$hook" -j KUBE-FIREWALL 2>/dev/null; do :; done
  done
  for t in mangle nat filter; do
    for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
      if "$ipt" -w -t "$t" -F "$chain" 2>/dev/null; then
        "$ipt" -w -t "$t" -X "$chain" 2>/dev/null || log "could not delete $ipt chain $t/$chain"
      fi
    done
  done
done
if [[ -f $KH_STATE/created-bridge ]] && ip link show "$KH_BRIDGE" >/dev/null 2>&1; then
  ip link del "$KH_BRIDGE"
fi

# 6. Host sysctls back to what they were before up.sh.
if [[ -f $KH_STATE/sysctl.saved ]]; then
  while IFS='=' read -r k v; do sysctl -qw "$k=$v" 2>/dev/null || log "could not restore sysctl $k=$v"; done <"$KH_STATE/sysctl.saved"
fi
[[ -f $KH_STATE/created-var-log-pods ]] && rm -rf /var/log/pods
[[ -f $KH_STATE/created-var-log-containers ]] && rm -rf /var/log/containers
if [[ -f $KH_STATE/created-run-containerd && -d /run/containerd ]]; then
  find /run/containerd -depth -type d -empty -delete 2>/dev/null || true
fi

# 7. Anything still recorded as running means something refused to die: say so, keep the state.
left=()
for f in "$KH_STATE"/pids/*.pid; do
  [[ -e $f ]] || continue
  n=$(basename "$f" .pid)
  running "$n" && left+=("$n")
done
((${#left[@]} == 0)) || die "still running after teardown: ${left[*]} (state kept in $KH_STATE)"
rm -rf "$KH_STATE" || die "could not remove $KH_STATE (busy mounts? see findmnt | grep $KH_STATE)"
log "cluster down; state removed"

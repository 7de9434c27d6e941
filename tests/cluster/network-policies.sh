# NetworkPolicy enforcement of the test cluster: sigs.k8s.io/kube-network-policies (built by
# build-network-policies.sh), run as a host process like the other components. Sourced by up.sh
# (netpol_start) and down.sh (netpol_stop).
# shellcheck shell=bash
#
# How it enforces: the agent hands the first packet of every new connection to or from a pod
# that a NetworkPolicy selects to userspace through NFQUEUE (queue $KH_NETPOL_QUEUE), evaluates
# the policies against its informers, and answers accept or drop; later packets of an accepted
# connection pass on conntrack. It is fail-closed: with the agent gone, queued packets are
# dropped. Its own hook is an nftables table (`inet kube-network-policies`) whose `queue`
# statement needs the kernel's nft_queue (CONFIG_NFT_QUEUE). Where that is missing (this
# machine's kernel: "Could not process rule: No such file or directory"), the agent's table is
# never created, and netpol_start installs the same hook with the xtables NFQUEUE target
# (CONFIG_NETFILTER_XT_TARGET_NFQUEUE) instead: chain KH-NETPOL in mangle POSTROUTING, queueing
# every new connection to or from the pod range (the agent accepts what no policy selects).

KH_NETPOL_DIR="$KH_CACHE/kube-network-policies-$KH_NETPOL_VERSION"
KH_NETPOL_BIN="$KH_NETPOL_DIR/bin/kube-network-policies"
KH_NETPOL_QUEUE=100
KH_NETPOL_METRICS=127.0.0.1:9080

# netpol_nft_queue_works: true when the kernel accepts an nftables `queue` statement.
netpol_nft_queue_works() {
  nft delete table inet kh-queue-probe 2>/dev/null || true
  if nft -f - 2>/dev/null <<'NFT'
table inet kh-queue-probe {
  chain probe { type filter hook postrouting priority 0; policy accept; meta l4proto tcp tcp dport 9 queue num 65000 bypass; }
}
NFT
  then
    nft delete table inet kh-queue-probe
    return 0
  fi
  return 1
}

# netpol_queue_bound: the agent has opened its NFQUEUE (/proc lists bound queues by number).
netpol_queue_bound() {
  awk -v q="$KH_NETPOL_QUEUE" '$1 == q { found = 1 } END { exit !found }' /proc/net/netfilter/nfnetlink_queue
}

netpol_start() {
  [[ -x $KH_NETPOL_BIN ]] || die "binary missing after build: $KH_NETPOL_BIN"
  [[ -r /proc/net/netfilter/nfnetlink_queue ]] || die "the kernel has no nfnetlink_queue (CONFIG_NETFILTER_NETLINK_QUEUE): kube-network-policies cannot enforce NetworkPolicy"
  local dir="$KH_STATE/kube-network-policies" sa
  sa="$dir/run/secrets/kubernetes.io/serviceaccount"
  mkdir -p "$sa"
  kh_kubectl apply -f "$KH_CLUSTER_DIR/manifests/kube-network-policies.yaml" >/dev/null \
    || die "applying the kube-network-policies RBAC failed"
  # The agent only knows in-cluster configuration: a token and the CA at the fixed paths under
  # /var/run/secrets, and KUBERNETES_SERVICE_HOST/PORT. It gets them in a mount namespace of its
  # own, where $dir/run is bind-mounted over /run: nothing is written to the host's /run.
  kh_kubectl -n kube-system create token kube-network-policies --duration 168h >"$sa/token.tmp" \
    || die "could not create a token for kube-network-policies"
  mv "$sa/token.tmp" "$sa/token"
  cp "$KH_STATE/pki/ca.crt" "$sa/ca.crt"
  printf 'kube-system' >"$sa/namespace"
  chmod -R go-rwx "$dir"

  if netpol_nft_queue_works; then
    log "NetworkPolicy: kube-network-policies hooks in with its own nftables table"
  else
    log "NetworkPolicy: this kernel's nftables has no queue statement (CONFIG_NFT_QUEUE); hooking kube-network-policies in with iptables -j NFQUEUE instead"
    iptables -w -t mangle -N KH-NETPOL
    iptables -w -t mangle -A KH-NETPOL -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
    # The host's own root processes (kubelet probes, the API server) are never filtered, as the
    # agent's own rules do (meta skuid 0 accept). A pod's traffic has no host socket.
    iptables -w -t mangle -A KH-NETPOL -m owner --uid-owner 0 -j RETURN
    iptables -w -t mangle -A KH-NETPOL -s "$KH_POD_CIDR" -j NFQUEUE --queue-num "$KH_NETPOL_QUEUE"
    iptables -w -t mangle -A KH-NETPOL -d "$KH_POD_CIDR" -j NFQUEUE --queue-num "$KH_NETPOL_QUEUE"
    iptables -w -t mangle -I POSTROUTING 1 -j KH-NETPOL
  fi

  # --netfilter-bug-1766-fix=false: DNS is evaluated in POSTROUTING like everything else (the
  # conntrack race it works around is fixed in kernels >= 6.12; the iptables hook above cannot
  # mirror its post-DNAT PREROUTING chain).
  local unshare_bin
  unshare_bin=$(command -v unshare)
  KUBERNETES_SERVICE_HOST=$KH_NODE_IP KUBERNETES_SERVICE_PORT=6443 \
    start kube-network-policies "$unshare_bin" --mount --propagation private -- \
    sh -c 'mount --bind "$1" /run && shift && exec "$@"' sh "$dir/run" \
    "$KH_NETPOL_BIN" --hostname-override "$KH_NODE_NAME" --nfqueue-id "$KH_NETPOL_QUEUE" \
    --metrics-bind-address "$KH_NETPOL_METRICS" --netfilter-bug-1766-fix=false --v=2
  # start recorded unshare as the binary; it execs the agent, which `running` must recognise.
  local f pid exe
  f=$(pidfile kube-network-policies)
  pid=$(head -n1 "$f")
  exe=$(readlink -f "$KH_NETPOL_BIN")
  agent_execd() { [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$exe" ]]; }
  wait_until 10 "kube-network-policies to start" agent_execd || {
    tail -n 20 "$(logfile kube-network-policies)" >&2
    die "kube-network-policies did not start (log: $(logfile kube-network-policies))"
  }
  printf '%s\n%s\n' "$pid" "$exe" >"$f"
  healthy kube-network-policies 60 netpol_queue_bound
}

# netpol_stop: SIGINT (the agent catches SIGINT only, then deletes its nftables table within ~5 s),
# then the hooks whatever state the agent left.
netpol_stop() {
  local f pid
  f=$(pidfile kube-network-policies)
  if running kube-network-policies; then
    pid=$(head -n1 "$f")
    kill -INT "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 10))
    while running kube-network-policies && ((SECONDS < deadline)); do sleep 0.2; done
  fi
  stop kube-network-policies 5
  if iptables -w -t mangle -n -L KH-NETPOL >/dev/null 2>&1; then
    while iptables -w -t mangle -D POSTROUTING -j KH-NETPOL 2>/dev/null; do :; done
    iptables -w -t mangle -F KH-NETPOL && iptables -w -t mangle -X KH-NETPOL
  fi
  if command -v nft >/dev/null; then
    nft delete table inet kube-network-policies 2>/dev/null || true
    nft delete table inet kh-queue-probe 2>/dev/null || true
  fi
}

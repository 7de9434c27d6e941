#!/usr/bin/env bash
# Brings up the single-node test cluster (or finds it up) and prints `KUBECONFIG=<path>` as its last
# line. Every component runs as a process started here, with its log in $KH_STATE/logs and its pid in
# $KH_STATE/pids; down.sh undoes everything. Every wait is bounded: a component that dies or never
# becomes healthy is reported by name with its log file.
. "$(dirname "$0")/lib.sh"
. "$KH_CLUSTER_DIR/pki.sh"
. "$KH_CLUSTER_DIR/configs.sh"
. "$KH_CLUSTER_DIR/network-policies.sh"

COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy
  kube-network-policies)

[[ $(id -u) == 0 ]] || die "up.sh must run as root (it runs kubelet, containerd and changes iptables)"
cluster_lock

# --- already up? --------------------------------------------------------------------------------
all_running() { local c; for c in "${COMPONENTS[@]}"; do running "$c" || return 1; done; }
if all_running && kh_kubectl get --raw /readyz >/dev/null 2>&1; then
  log "cluster already up"
  [[ ${KH_FLUX:-0} == 1 ]] && "$KH_CLUSTER_DIR/flux.sh" up
  echo "KUBECONFIG=$KH_KUBECONFIG"
  exit 0
fi
if compgen -G "$KH_STATE/pids/*.pid" >/dev/null || [[ -d $KH_STATE ]]; then
  log "found a partial or stale cluster in $KH_STATE; tearing it down first"
  "$KH_CLUSTER_DIR/down.sh"
fi

# --- prerequisites ------------------------------------------------------------------------------
need() { command -v "$1" >/dev/null || die "prerequisite missing: $1 (Debian package: $2; run tests/cluster/prereqs.sh)"; }
need containerd containerd; need ctr containerd; need runc runc; need iptables iptables
need conntrack conntrack; need openssl openssl; need curl curl; need buildah buildah; need ip iproute2
need ss iproute2; need setsid util-linux; need findmnt util-linux; need unshare util-linux
need nft nftables
for p in bridge host-local loopback portmap; do
  [[ -x /usr/lib/cni/$p ]] || die "prerequisite missing: CNI plugin /usr/lib/cni/$p (Debian package: containernetworking-plugins)"
done
[[ -d /sys/fs/cgroup/memory && -d /sys/fs/cgroup/cpu ]] || die "cgroup v1 memory/cpu controllers not mounted under /sys/fs/cgroup (kubelet $KH_K8S_VERSION here uses cgroup v1 with the cgroupfs driver)"
grep -qw overlay /proc/filesystems || die "kernel lacks overlayfs (containerd's overlayfs snapshotter needs it)"
[[ -d /proc/sys/net/bridge ]] || die "br_netfilter is not loaded (modprobe br_netfilter): Service traffic between pods on the bridge needs it"

"$KH_CLUSTER_DIR/build-binaries.sh"
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl coredns; do
  [[ -x $KH_BIN/$b ]] || die "binary missing after build: $KH_BIN/$b"
done
"$KH_CLUSTER_DIR/build-network-policies.sh"
"$KH_CLUSTER_DIR/base-image.sh"
images=$("$KH_CLUSTER_DIR/cluster-images.sh")

# Ports: a clear message instead of a component crash-looping on EADDRINUSE.
for spec in 2379:etcd 2380:etcd 6443:kube-apiserver 10257:kube-controller-manager 10259:kube-scheduler \
  10250:kubelet 10248:kubelet 10249:kube-proxy 10256:kube-proxy "${KH_NETPOL_METRICS##*:}:kube-network-policies"; do
  port=${spec%%:*} comp=${spec#*:}
  if [[ -n $(ss -Hltn "sport = :$port") ]]; then
    die "port $port (needed by $comp) is already in use: $(ss -Hltnp "sport = :$port" | head -n1)"
  fi
done
for cidr in "$KH_POD_CIDR" "$KH_SERVICE_CIDR"; do
  if ip -4 route show to match "${cidr%/*}" | grep -v '^default' | grep -q .; then
    die "address range $cidr collides with a host route: $(ip -4 route show to match "${cidr%/*}" | grep -v '^default')"
  fi
done

# --- state, network, PKI ------------------------------------------------------------------------
mkdir -p "$KH_STATE"/{logs,pids,images}
chmod 700 "$KH_STATE"
for k in "${KH_SYSCTLS[@]}"; do
  v=$(sysctl -n "$k" 2>/dev/null) && printf '%s=%s\n' "$k" "$v"
done >"$KH_STATE/sysctl.saved"
[[ -d /var/log/pods ]] || touch "$KH_STATE/created-var-log-pods"
[[ -d /var/log/containers ]] || touch "$KH_STATE/created-var-log-containers"
# containerd-shim keeps fifos and sockets under /run/containerd whatever its config says.
[[ -d /run/containerd ]] || touch "$KH_STATE/created-run-containerd"
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1

log "network: bridge $KH_BRIDGE $KH_NODE_IP, pods $KH_POD_CIDR, services $KH_SERVICE_CIDR"
ip link add "$KH_BRIDGE" type bridge 2>/dev/null || die "could not create bridge $KH_BRIDGE (does it exist already? run down.sh)"
ip addr add "$KH_NODE_IP/${KH_POD_CIDR#*/}" dev "$KH_BRIDGE"
ip link set "$KH_BRIDGE" up
touch "$KH_STATE/created-bridge"
# Egress guard: pods may talk to each other and to the node, never be forwarded anywhere else.
iptables -w -N KH-EGRESS
iptables -w -A KH-EGRESS -i "$KH_BRIDGE" -o "$KH_BRIDGE" -j RETURN
iptables -w -A KH-EGRESS -i "$KH_BRIDGE" -j DROP
iptables -w -I FORWARD 1 -j KH-EGRESS

pki="$KH_STATE/pki"
make_pki "$pki" "$KH_NODE_IP" "$KH_NODE_NAME"
server="https://$KH_NODE_IP:6443"
make_kubeconfig "$KH_KUBECONFIG" "$server" "$pki" admin kubernetes-admin
make_kubeconfig "$KH_STATE/controller-manager.kubeconfig" "$server" "$pki" controller-manager system:kube-controller-manager
make_kubeconfig "$KH_STATE/scheduler.kubeconfig" "$server" "$pki" scheduler system:kube-scheduler
make_kubeconfig "$KH_STATE/kubelet.kubeconfig" "$server" "$pki" kubelet "system:node:$KH_NODE_NAME"
make_kubeconfig "$KH_STATE/kube-proxy.kubeconfig" "$server" "$pki" kube-proxy system:kube-proxy
write_configs

# --- components ---------------------------------------------------------------------------------
# start NAME BINARY ARGS...: runs BINARY in its own session, recording pid and binary path. Extra
# flags for debugging come from KH_ARGS_<NAME> (e.g. KH_ARGS_KUBE_APISERVER="--v=4").
start() {
  local name=$1 bin=$2; shift 2
  local var extra=()
  var="KH_ARGS_$(tr 'a-z-' 'A-Z_' <<<"$name")"
  read -r -a extra <<<"${!var:-}"
  log "starting $name (log: $(logfile "$name"))"
  setsid "$bin" "$@" "${extra[@]}" >>"$(logfile "$name")" 2>&1 </dev/null 9>&- &
  printf '%s\n%s\n' "$!" "$(readlink -f "$bin")" >"$(pidfile "$name")"
}

# healthy NAME SECONDS CHECK...: waits for CHECK; fails fast, naming the log, if NAME exits.
healthy() {
  local name=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! running "$name"; then
      printf 'ERROR: %s exited during startup. Log: %s\n--- last lines ---\n' "$name" "$(logfile "$name")" >&2
      tail -n 25 "$(logfile "$name")" >&2
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      printf 'ERROR: %s is running but not healthy after %ss. Log: %s\n--- last lines ---\n' \
        "$name" "$timeout" "$(logfile "$name")" >&2
      tail -n 25 "$(logfile "$name")" >&2
      exit 1
    fi
    sleep 0.5
  done
}

tls_get() { curl -fsS --max-time 3 --cacert "$pki/ca.crt" --cert "$pki/$1.crt" --key "$pki/$1.key" "$2"; }

start etcd "$KH_BIN/etcd" --name kh --data-dir "$KH_STATE/etcd" --log-level warn \
  --listen-client-urls https://127.0.0.1:2379 --advertise-client-urls https://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster kh=http://127.0.0.1:2380 --listen-metrics-urls '' \
  --cert-file "$pki/etcd-server.crt" --key-file "$pki/etcd-server.key" \
  --client-cert-auth --trusted-ca-file "$pki/ca.crt"
healthy etcd 30 tls_get apiserver-etcd-client https://127.0.0.1:2379/health

start kube-apiserver "$KH_BIN/kube-apiserver" \
  --advertise-address "$KH_NODE_IP" --bind-address "$KH_NODE_IP" --secure-port 6443 \
  --etcd-servers https://127.0.0.1:2379 --etcd-cafile "$pki/ca.crt" \
  --etcd-certfile "$pki/apiserver-etcd-client.crt" --etcd-keyfile "$pki/apiserver-etcd-client.key" \
  --client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
  --service-account-issuer "https://kubernetes.default.svc.$KH_CLUSTER_DOMAIN" \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-cluster-ip-range "$KH_SERVICE_CIDR" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged=true \
  --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
  --profiling=false
healthy kube-apiserver 90 tls_get admin "https://$KH_NODE_IP:6443/readyz"

start kube-controller-manager "$KH_BIN/kube-controller-manager" \
  --kubeconfig "$KH_STATE/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$KH_STATE/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$KH_STATE/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --cluster-name kube-harness \
  --service-cluster-ip-range "$KH_SERVICE_CIDR" --allocate-node-cidrs=false \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --root-ca-file "$pki/ca.crt" --service-account-private-key-file "$pki/sa.key" \
  --use-service-account-credentials=true --profiling=false
start kube-scheduler "$KH_BIN/kube-scheduler" \
  --kubeconfig "$KH_STATE/scheduler.kubeconfig" \
  --authentication-kubeconfig "$KH_STATE/scheduler.kubeconfig" \
  --authorization-kubeconfig "$KH_STATE/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --profiling=false
start containerd "$(command -v containerd)" --config "$KH_STATE/containerd/config.toml"
healthy kube-controller-manager 60 curl -fsSk --max-time 3 https://127.0.0.1:10257/healthz
healthy kube-scheduler 60 curl -fsSk --max-time 3 https://127.0.0.1:10259/healthz
healthy containerd 30 ctr --address "$KH_CONTAINERD_SOCK" version

while IFS='=' read -r name archive; do load_image "$archive" "$name"; done <<<"$images"

start kubelet "$KH_BIN/kubelet" --config "$KH_STATE/kubelet/config.yaml" \
  --kubeconfig "$KH_STATE/kubelet.kubeconfig" --root-dir "$KH_STATE/kubelet/root" \
  --cert-dir "$KH_STATE/kubelet/pki" --node-ip "$KH_NODE_IP" --hostname-override "$KH_NODE_NAME"
healthy kubelet 60 curl -fsS --max-time 3 http://127.0.0.1:10248/healthz
node_ready() {
  [[ $(kh_kubectl get node "$KH_NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
healthy kubelet 90 node_ready

start kube-proxy "$KH_BIN/kube-proxy" --config "$KH_STATE/kube-proxy/config.yaml"
healthy kube-proxy 60 curl -fsS --max-time 3 http://127.0.0.1:10256/healthz

# NetworkPolicy: the bridge CNI ignores it; kube-network-policies enforces it (network-policies.sh).
netpol_start

log "deploying CoreDNS"
sed -e "s/@DNS_IP@/$KH_DNS_IP/" -e "s/@DOMAIN@/$KH_CLUSTER_DOMAIN/" "$KH_CLUSTER_DIR/manifests/coredns.yaml" \
  | kh_kubectl apply -f - >/dev/null || die "applying the CoreDNS manifests failed"
dns_ready() {
  [[ $(kh_kubectl -n kube-system get deploy coredns -o 'jsonpath={.status.readyReplicas}') == 1 ]]
}
if ! wait_until 120 "CoreDNS to become ready" dns_ready; then
  kh_kubectl -n kube-system get pods -o wide >&2 || true
  kh_kubectl -n kube-system describe pods -l k8s-app=kube-dns 2>&1 | tail -n 30 >&2 || true
  die "CoreDNS did not become ready within 120s (kubelet log: $(logfile kubelet), containerd log: $(logfile containerd))"
fi

"$KH_CLUSTER_DIR/storage.sh"
# Flux's source- and kustomize-controller for the GitOps suite, only when asked (tests/cluster/flux.sh).
[[ ${KH_FLUX:-0} == 1 ]] && "$KH_CLUSTER_DIR/flux.sh" up

log "cluster up: $KH_K8S_VERSION, node $KH_NODE_NAME Ready, CoreDNS at $KH_DNS_IP, NetworkPolicy enforced by kube-network-policies $KH_NETPOL_VERSION"
echo "KUBECONFIG=$KH_KUBECONFIG"

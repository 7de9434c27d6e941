# Configuration files of containerd, CNI, kubelet and kube-proxy. Sourced by up.sh.
# shellcheck shell=bash

write_configs() {
  local s=$KH_STATE
  mkdir -p "$s/containerd" "$s/cni/net.d" "$s/kubelet" "$s/kube-proxy"

  # containerd 1.6 (config v2): all state under $KH_STATE (also runc's), own socket, netns mounts
  # under its state dir so down.sh can find them, the locally built pause image, cgroupfs driver.
  cat >"$s/containerd/config.toml" <<CFG
version = 2
root = "$s/containerd/root"
state = "$s/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$KH_CONTAINERD_SOCK"

[plugins."io.containerd.internal.v1.opt"]
  path = "$s/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/kube-harness/pause:dev"
  netns_mounts_under_state_dir = true
  # These machines withhold CAP_SYS_RESOURCE from root, so runc cannot lower oom_score_adj below
  # containerd's own (kubelet asks -998 for sandboxes); clamp instead of failing every sandbox.
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$s/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$s/cni/net.d"
    max_conf_num = 1
CFG

  # Bridge CNI on our own bridge; no masquerade (pods never talk to the outside).
  cat >"$s/cni/net.d/10-kube-harness.conflist" <<CFG
{
  "cniVersion": "1.0.0",
  "name": "kube-harness",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$KH_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$s/cni/ipam",
        "ranges": [[{"subnet": "$KH_POD_CIDR", "gateway": "$KH_NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CFG

  # Pods with dnsPolicy Default get this resolv.conf: no upstream resolver outside the cluster.
  printf 'nameserver 127.0.0.1\noptions ndots:1\n' >"$s/kubelet/resolv.conf"

  cat >"$s/kubelet/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $KH_NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $s/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $s/pki/kubelet-serving.crt
tlsPrivateKeyFile: $s/pki/kubelet-serving.key
containerRuntimeEndpoint: unix://$KH_CONTAINERD_SOCK
imageServiceEndpoint: unix://$KH_CONTAINERD_SOCK
cgroupDriver: cgroupfs
failSwapOn: false
clusterDomain: $KH_CLUSTER_DOMAIN
clusterDNS: [$KH_DNS_IP]
resolvConf: $s/kubelet/resolv.conf
# Only our bridge address counts as the node's address.
registerNode: true
rotateCertificates: false
serverTLSBootstrap: false
# The shared test disk is large but busy: never evict test pods for disk pressure.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 110
# Every pod's processes are bounded too (the worker's own per-uid RLIMIT_NPROC is the first bound;
# docs/security-model.md, "Processes"). Production clusters should set it as well.
podPidsLimit: 4096
# Faster feedback in tests.
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
fileCheckFrequency: 10s
CFG

  cat >"$s/kube-proxy/config.yaml" <<CFG
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $s/kube-proxy.kubeconfig}
hostnameOverride: $KH_NODE_NAME
clusterCIDR: $KH_POD_CIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# NodePorts only on the bridge address; leave the host's conntrack sysctls alone.
nodePortAddresses: ["$KH_NODE_IP/32"]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
CFG
}

# PKI and kubeconfigs for the test cluster, made with openssl. Sourced by up.sh.
# shellcheck shell=bash

# make_ca DIR NAME CN: self-signed EC CA valid for 1 year.
make_ca() {
  local dir=$1 name=$2 cn=$3
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/$name.key" 2>/dev/null
  openssl req -x509 -new -key "$dir/$name.key" -subj "/CN=$cn" -days 365 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$dir/$name.crt" 2>/dev/null
}

# make_cert DIR CA NAME SUBJECT USAGE [SANS]: EC key + cert signed by CA; USAGE is serverAuth and/or
# clientAuth; SANS is an openssl subjectAltName value ("DNS:a,IP:1.2.3.4").
make_cert() {
  local dir=$1 ca=$2 name=$3 subj=$4 usage=$5 sans=${6:-}
  local ext="$dir/$name.ext"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n $sans ]] && echo "subjectAltName=$sans"
  } >"$ext"
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/$name.key" 2>/dev/null
  openssl req -new -key "$dir/$name.key" -subj "$subj" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/$ca.crt" -CAkey "$dir/$ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
  rm -f "$dir/$name.csr" "$dir/$name.ext"
}

# make_kubeconfig FILE SERVER PKI NAME USER: kubeconfig with the CA and client cert embedded.
make_kubeconfig() {
  local file=$1 server=$2 pki=$3 name=$4 user=$5
  cat >"$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: kube-harness
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$pki/$name.crt")
    client-key-data: $(base64 -w0 "$pki/$name.key")
contexts:
- name: $user@kube-harness
  context: {cluster: kube-harness, user: $user}
current-context: $user@kube-harness
KC
  chmod 600 "$file"
}

# make_pki DIR NODE_IP NODE_NAME: every certificate the control plane, node and admin need.
make_pki() {
  local d=$1 ip=$2 node=$3
  mkdir -p "$d"; chmod 700 "$d"
  make_ca "$d" ca kube-harness-ca
  make_ca "$d" front-proxy-ca kube-harness-front-proxy-ca
  make_cert "$d" ca apiserver "/CN=kube-apiserver" serverAuth \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$ip,IP:$KH_SERVICE_IP_API"
  make_cert "$d" ca etcd-server "/CN=etcd" serverAuth "DNS:localhost,IP:127.0.0.1"
  make_cert "$d" ca apiserver-etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
  make_cert "$d" ca apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  make_cert "$d" front-proxy-ca front-proxy-client "/CN=front-proxy-client" clientAuth
  make_cert "$d" ca admin "/O=system:masters/CN=kubernetes-admin" clientAuth
  make_cert "$d" ca controller-manager "/CN=system:kube-controller-manager" clientAuth
  make_cert "$d" ca scheduler "/CN=system:kube-scheduler" clientAuth
  make_cert "$d" ca kube-proxy "/CN=system:kube-proxy" clientAuth
  make_cert "$d" ca kubelet "/O=system:nodes/CN=system:node:$node" clientAuth
  make_cert "$d" ca kubelet-serving "/O=system:nodes/CN=system:node:$node" serverAuth "DNS:$node,IP:$ip"
  # Service-account token signing pair.
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  chmod 600 "$d"/*.key
}

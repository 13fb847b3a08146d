#!/usr/bin/env bash
# Certificates without cert-manager (apiservice/README.md): a CA and serving
# certificate for the API server, a CA and member/peer/client certificates for
# etcd; the Secrets deploy/ mounts; and the APIService's caBundle.
#
#   hack/gen-certs.sh [DIR]
#
# DIR (default .dev/certs) keeps the keys. Run again with the same DIR to renew
# the leaf certificates under the same CAs: the caBundle then stays valid and
# the server picks up its new certificate from the Secret without a restart.
#
# Environment: NAMESPACE, SERVICE, ETCD, APISERVICE (names, defaulting to
# deploy/'s), DAYS (leaf lifetime, 365), KUBECTL (kubectl), CERTS_ONLY=1 (write
# files only), DRY_RUN=server|client (passed to kubectl; changes nothing).
set -euo pipefail

NAMESPACE=${NAMESPACE:-storage-transfer-system}
SERVICE=${SERVICE:-storage-transfer-apiserver}
ETCD=${ETCD:-storage-transfer-etcd}
APISERVICE=${APISERVICE:-v1alpha1.storage.transfer.k8s.io}
DAYS=${DAYS:-365}
KUBECTL=${KUBECTL:-kubectl}
DRY_RUN=${DRY_RUN:-none}
dir=${1:-.dev/certs}
mkdir -p "$dir"
umask 077

# ca NAME: a self-signed CA, kept if DIR already has one.
ca() {
  [[ -f $dir/$1.crt && -f $dir/$1.key ]] && return
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/$1.key"
  openssl req -x509 -new -key "$dir/$1.key" -subj "/CN=$1" -days 3650 \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$dir/$1.crt"
}

# leaf NAME CA CN EXTENDED-KEY-USAGE [SUBJECT-ALT-NAMES]
leaf() {
  local name=$1 ca=$2 cn=$3 eku=$4 san=${5:-}
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/$name.key"
  openssl req -new -key "$dir/$name.key" -subj "/CN=$cn" -out "$dir/$name.csr"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    if [[ -n $san ]]; then echo "subjectAltName=$san"; fi
  } >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/$ca.crt" -CAkey "$dir/$ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$DAYS" \
    -extfile "$dir/$name.ext" -out "$dir/$name.crt" 2>/dev/null
  rm -f "$dir/$name.csr" "$dir/$name.ext"
}

svc=$SERVICE.$NAMESPACE.svc
ca apiserver-ca
leaf apiserver-serving apiserver-ca "$svc" serverAuth "DNS:$svc,DNS:$svc.cluster.local"

peers=$ETCD-peer.$NAMESPACE.svc
etcd_names="DNS:$ETCD,DNS:$ETCD.$NAMESPACE.svc,DNS:$ETCD.$NAMESPACE.svc.cluster.local"
etcd_names+=",DNS:*.$peers,DNS:*.$peers.cluster.local,DNS:localhost,IP:127.0.0.1"
ca etcd-ca
# etcd's gateway dials its own client port with the server certificate.
leaf etcd-server etcd-ca "$ETCD" serverAuth,clientAuth "$etcd_names"
leaf etcd-peer etcd-ca "$ETCD-peer" serverAuth,clientAuth "$etcd_names"
leaf etcd-client etcd-ca "$SERVICE" clientAuth

if [[ -n ${CERTS_ONLY:-} ]]; then exit 0; fi

apply() { "$KUBECTL" apply --dry-run="$DRY_RUN" -f -; }

# ca.crt beside the pair, as cert-manager writes it: the ServiceMonitor of
# deploy/monitoring trusts the server's certificate through it.
"$KUBECTL" create secret generic "$SERVICE-serving" -n "$NAMESPACE" --type=kubernetes.io/tls \
  --from-file=tls.crt="$dir/apiserver-serving.crt" --from-file=tls.key="$dir/apiserver-serving.key" \
  --from-file=ca.crt="$dir/apiserver-ca.crt" --dry-run=client -o yaml | apply
for name in server peer client; do
  "$KUBECTL" create secret generic "$ETCD-$name" -n "$NAMESPACE" --type=kubernetes.io/tls \
    --from-file=tls.crt="$dir/etcd-$name.crt" --from-file=tls.key="$dir/etcd-$name.key" \
    --from-file=ca.crt="$dir/etcd-ca.crt" --dry-run=client -o yaml | apply
done
"$KUBECTL" patch apiservice "$APISERVICE" --dry-run="$DRY_RUN" --type=merge \
  -p "{\"spec\":{\"caBundle\":\"$(base64 <"$dir/apiserver-ca.crt" | tr -d '\n')\"}}"

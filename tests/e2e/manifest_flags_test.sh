#!/bin/bash
# Every DELAYD_* variable the Kubernetes and compose files set names a flag
# of delayd (its --help lists each flag's variable): a renamed or misspelt flag in a
# manifest would otherwise be ignored silently by the container.
# Usage: manifest_flags_test.sh DELAYD_BINARY SOURCE_DIR
set -euo pipefail
delayd=$1
src=$2
known=$("$delayd" --help | grep -o 'Env:DELAYD_[A-Z_]*' | sed 's/Env://' | sort -u)
[ -n "$known" ] || { echo "delayd --help lists no variables"; exit 1; }
status=0
checked=0
for f in "$src"/docker/kubernetes.yaml "$src"/docker/kubernetes-single.yaml \
         "$src"/docker/compose.yaml; do
  for v in $(grep -o 'DELAYD_[A-Z_]*' "$f" | sort -u); do
    checked=$((checked + 1))
    if ! grep -qx "$v" <<<"$known"; then
      echo "$f: $v is not a flag of delayd"
      status=1
    fi
  done
done
[ "$checked" -gt 20 ] || { echo "only $checked variables found"; exit 1; }
echo "$checked variables, each a flag of delayd"
exit $status

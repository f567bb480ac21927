#!/usr/bin/env bash
# Generates the stubs checked in under delayd/v1/ from proto/ (protoc and
# grpc_python_plugin, Debian's protobuf-compiler and protobuf-compiler-grpc).
# The library's test fails when they differ from what this makes.
set -euo pipefail
cd "$(dirname "$0")"
protoc -I../../proto --python_out=. --grpc_out=. \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" \
  delayd/v1/delayd.proto

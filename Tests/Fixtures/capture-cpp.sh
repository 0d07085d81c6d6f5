#!/usr/bin/env bash
# Captures what the official Sensors C++ SDK sends (Tests/Fixtures/sensors/cpp-sdk-VERSION.jsonl).
#   Tests/Fixtures/capture-cpp.sh SDK_GIT_DIR OUT.jsonl
# SDK_GIT_DIR is a clone (or bare mirror) of github.com/sensorsdata/sa-sdk-cpp; its HEAD is built
# unmodified with capture-cpp/capture.cpp (Debian's g++, libcurl4-openssl-dev, zlib1g-dev) and run
# against Tests/Fixtures/capture.py on a free local port.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/capture-server.sh"
sdk="${1:?usage: capture-cpp.sh SDK_GIT_DIR OUT.jsonl}"
out="${2:?usage: capture-cpp.sh SDK_GIT_DIR OUT.jsonl}"
command -v g++ >/dev/null && [ -e /usr/include/x86_64-linux-gnu/curl/curl.h ] || [ -e /usr/include/curl/curl.h ] \
    || { echo "capture-cpp: install g++, libcurl4-openssl-dev and zlib1g-dev first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
git --git-dir="$(git -C "$sdk" rev-parse --absolute-git-dir)" archive HEAD | tar -x -C "$work"
g++ -std=c++11 -O1 -I "$work/include" "$work"/src/*.cpp "$here/capture-cpp/capture.cpp" -lcurl -lz -o "$work/capture"
start_capture_server "$out"
TZ=Asia/Shanghai "$work/capture" "$work/staging" "http://127.0.0.1:$port"
echo "capture-cpp: $(wc -l <"$out") requests in $out"

#!/usr/bin/env bash
# Captures what the official Sensors Go SDK sends (Tests/Fixtures/sensors/go-sdk-VERSION.jsonl).
#   Tests/Fixtures/capture-go.sh SDK_GIT_DIR OUT.jsonl
# SDK_GIT_DIR is a clone (or bare mirror) of github.com/sensorsdata/sa-sdk-go; its HEAD is built
# unmodified in a temporary module together with capture-go/main.go (Debian's golang-go, no module
# downloads), and run against Tests/Fixtures/capture.py on a free local port.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/capture-server.sh"
sdk="${1:?usage: capture-go.sh SDK_GIT_DIR OUT.jsonl}"
out="${2:?usage: capture-go.sh SDK_GIT_DIR OUT.jsonl}"
command -v go >/dev/null || { echo "capture-go: install golang-go first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
git --git-dir="$(git -C "$sdk" rev-parse --absolute-git-dir)" archive HEAD | tar -x -C "$work"
printf 'module github.com/sensorsdata/sa-sdk-go\n\ngo 1.19\n' >"$work/go.mod"
mkdir -p "$work/cmd/capture" && cp "$here/capture-go/main.go" "$work/cmd/capture/"
(cd "$work" && GOFLAGS=-mod=mod GOPROXY=off go build -o capture ./cmd/capture)
start_capture_server "$out"
"$work/capture" "http://127.0.0.1:$port"
echo "capture-go: $(wc -l <"$out") requests in $out"

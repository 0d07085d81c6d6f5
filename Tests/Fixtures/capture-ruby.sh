#!/usr/bin/env bash
# Captures what the official Sensors Ruby SDK sends (Tests/Fixtures/sensors/ruby-sdk-VERSION.jsonl).
#   Tests/Fixtures/capture-ruby.sh SDK_GIT_DIR OUT.jsonl
# SDK_GIT_DIR is a clone (or bare mirror) of github.com/sensorsdata/sa-sdk-ruby; its HEAD runs
# unmodified (it needs Ruby's standard library only: Debian's ruby) with capture-ruby/capture.rb,
# against Tests/Fixtures/capture.py on a free local port.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/capture-server.sh"
sdk="${1:?usage: capture-ruby.sh SDK_GIT_DIR OUT.jsonl}"
out="${2:?usage: capture-ruby.sh SDK_GIT_DIR OUT.jsonl}"
command -v ruby >/dev/null || { echo "capture-ruby: install ruby first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
git --git-dir="$(git -C "$sdk" rev-parse --absolute-git-dir)" archive HEAD | tar -x -C "$work"
start_capture_server "$out"
TZ=Asia/Shanghai ruby -I "$work/lib" "$here/capture-ruby/capture.rb" "http://127.0.0.1:$port"
echo "capture-ruby: $(wc -l <"$out") requests in $out"

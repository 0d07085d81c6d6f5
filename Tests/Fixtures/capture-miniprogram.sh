#!/usr/bin/env bash
# Captures what the official Sensors WeChat mini-program SDK sends
# (Tests/Fixtures/sensors/miniprogram-sdk-VERSION.jsonl).
#   Tests/Fixtures/capture-miniprogram.sh SDK_GIT_DIR OUT.jsonl
# SDK_GIT_DIR is a clone (or bare mirror) of github.com/sensorsdata/sa-sdk-miniprogram. Both of its
# builds at HEAD (dist/wechat and dist/v2), unmodified, run in Node under capture-miniprogram/wx-shim.js,
# in batch mode and (the wechat build) in plain mode, one request a record; the v2 build's plain
# mode sends nothing by itself (`kit.onceSend` is empty until a plugin fills it). Each as two phones of one user
# (capture-miniprogram/run.js), against Tests/Fixtures/capture.py on a free local port. Each run's
# requests are marked with `?capture=BUILD-MODE-PHONE` on the server URL.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/capture-server.sh"
sdk="${1:?usage: capture-miniprogram.sh SDK_GIT_DIR OUT.jsonl}"
out="${2:?usage: capture-miniprogram.sh SDK_GIT_DIR OUT.jsonl}"
command -v node >/dev/null || { echo "capture-miniprogram: Node.js is needed" >&2; exit 1; }
work="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
git_dir="$(git -C "$sdk" rev-parse --absolute-git-dir)"
for build in wechat v2; do git --git-dir="$git_dir" show "HEAD:dist/$build/sensorsdata.cjs.js" >"$work/$build.js"; done
start_capture_server "$out"
for build in wechat v2; do
    modes="batch plain"
    [ "$build" = v2 ] && modes=batch
    for mode in $modes; do
        for phone in 1 2; do
            node "$here/capture-miniprogram/run.js" "$work/$build.js" "http://127.0.0.1:$port/sa?project=default&capture=$build-$mode-$phone" "$mode" "$phone"
        done
    done
done
echo "capture-miniprogram: $(wc -l <"$out") requests in $out"

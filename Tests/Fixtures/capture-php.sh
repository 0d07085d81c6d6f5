#!/usr/bin/env bash
# Captures what the official Sensors PHP SDK sends (Tests/Fixtures/sensors/php-sdk-VERSION.jsonl).
#   Tests/Fixtures/capture-php.sh SDK_GIT_DIR OUT.jsonl
# SDK_GIT_DIR is a clone (or bare mirror) of github.com/sensorsdata/sa-sdk-php; its HEAD runs
# unmodified (Debian's php-cli and php-curl) with capture-php/capture.php, against
# Tests/Fixtures/capture.py on a free local port.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/capture-server.sh"
sdk="${1:?usage: capture-php.sh SDK_GIT_DIR OUT.jsonl}"
out="${2:?usage: capture-php.sh SDK_GIT_DIR OUT.jsonl}"
php -m 2>/dev/null | grep -qx curl || { echo "capture-php: install php-cli and php-curl first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
git --git-dir="$(git -C "$sdk" rev-parse --absolute-git-dir)" archive HEAD | tar -x -C "$work"
start_capture_server "$out"
TZ=Asia/Shanghai php "$here/capture-php/capture.php" "$work" "http://127.0.0.1:$port"
echo "capture-php: $(wc -l <"$out") requests in $out"

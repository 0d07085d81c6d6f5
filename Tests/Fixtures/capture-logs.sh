#!/usr/bin/env bash
# Makes the log files the official server SDKs write in production (Tests/Fixtures/sensors/logs/),
# the input of `datongctl import`:
#   Tests/Fixtures/capture-logs.sh go   SDK_GIT_DIR OUT_DIR   LoggingConsumer (golang-go)
#   Tests/Fixtures/capture-logs.sh java SDK_GIT_DIR OUT_DIR   ConcurrentLoggingConsumer (default-jdk, jars as capture-java.sh)
#   Tests/Fixtures/capture-logs.sh php  SDK_GIT_DIR OUT_DIR   FileConsumer (php-cli)
#   Tests/Fixtures/capture-logs.sh python VERSION OUT_DIR     LoggingConsumer (SensorsAnalyticsSDK==VERSION from PyPI)
# SDK_GIT_DIR is a clone or bare mirror of github.com/sensorsdata/sa-sdk-*; its HEAD is used
# unmodified (as the capture-*.sh scripts do). The scenario (capture-logs/) is the same in the four
# languages; OUT_DIR gets the files under the names the SDK gave them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sdk="${1:?usage: capture-logs.sh go|java|php|python SDK_GIT_DIR|VERSION OUT_DIR}"
source_="${2:?usage: capture-logs.sh go|java|php|python SDK_GIT_DIR|VERSION OUT_DIR}"
out="${3:?usage: capture-logs.sh go|java|php|python SDK_GIT_DIR|VERSION OUT_DIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
unpack() { git --git-dir="$(git -C "$source_" rev-parse --absolute-git-dir)" archive HEAD "$@" | tar -x -C "$work"; }
case "$sdk" in
go)
    command -v go >/dev/null || { echo "capture-logs: install golang-go first" >&2; exit 1; }
    unpack
    printf 'module github.com/sensorsdata/sa-sdk-go\n\ngo 1.19\n' >"$work/go.mod"
    mkdir -p "$work/cmd/logs" && cp "$here/capture-logs/main.go" "$work/cmd/logs/"
    (cd "$work" && GOFLAGS=-mod=mod GOPROXY=off go build -o logs ./cmd/logs)
    "$work/logs" "$out/service_log"
    ;;
java)
    command -v javac >/dev/null || { echo "capture-logs: install default-jdk first" >&2; exit 1; }
    classpath=""
    for jar in jackson-core jackson-databind jackson-annotations httpclient httpcore commons-logging commons-codec slf4j-api slf4j-simple lombok; do
        [ -f "/usr/share/java/$jar.jar" ] || { echo "capture-logs: /usr/share/java/$jar.jar is missing (see capture-java.sh)" >&2; exit 1; }
        classpath="$classpath/usr/share/java/$jar.jar:"
    done
    unpack SensorsAnalyticsSDK/src/main
    src="$work/SensorsAnalyticsSDK/src/main/java"
    # The same two catch clauses capture-java.sh widens for Debian's Jackson.
    for file in $(grep -rl "JsonProcessingException e)\|JsonProcessingException {" "$src"); do
        sed -i 's/catch (JsonProcessingException e)/catch (java.io.IOException e)/; s/throws InvalidArgumentException, JsonProcessingException {/throws InvalidArgumentException, java.io.IOException {/' "$file"
    done
    mkdir -p "$work/classes"
    javac -nowarn -encoding UTF-8 -d "$work/classes" -cp "$classpath" -processorpath /usr/share/java/lombok.jar \
        $(find "$src" -name '*.java' ! -name 'HelloSensorsAnalytics.java') "$here/capture-logs/Logs.java" 2>&1 | grep -v '^Note:' || true
    [ -f "$work/classes/Logs.class" ] || { echo "capture-logs: the Java SDK did not compile" >&2; exit 1; }
    java -cp "$work/classes:$classpath" Logs "$out/service_log"
    ;;
php)
    command -v php >/dev/null || { echo "capture-logs: install php-cli first" >&2; exit 1; }
    unpack
    php "$here/capture-logs/logs.php" "$work" "$out/sa.log"
    ;;
python)
    python3 -m venv "$work/venv"
    "$work/venv/bin/pip" install --quiet "SensorsAnalyticsSDK==$source_"
    "$work/venv/bin/python" "$here/capture-logs/logs.py" "$out/sa.log"
    ;;
*)
    echo "capture-logs: unknown SDK '$sdk' (go, java, php or python)" >&2
    exit 2
    ;;
esac
echo "capture-logs $sdk: $(cat "$out"/* | wc -l) lines in $(ls "$out" | tr '\n' ' ')"

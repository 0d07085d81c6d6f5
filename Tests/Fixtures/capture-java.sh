#!/usr/bin/env bash
# Captures what the official Sensors Java SDK sends (Tests/Fixtures/sensors/java-sdk-VERSION.jsonl).
#   Tests/Fixtures/capture-java.sh SDK_GIT_DIR OUT.jsonl
# SDK_GIT_DIR is a clone (or bare mirror) of github.com/sensorsdata/sa-sdk-java. Its HEAD's
# SensorsAnalyticsSDK/src/main is compiled with Debian's jars (default-jdk, libjackson2-databind-java,
# libhttpclient-java, liblombok-java, libslf4j-java; no Maven downloads) together with
# capture-java/Capture.java, and run against Tests/Fixtures/capture.py on a free local port.
# One edit, at build time only: Debian's jackson-databind declares `writeValueAsString` as also
# throwing IOException, so the SDK's `catch (JsonProcessingException e)` clauses (and one `throws`)
# name IOException instead, or javac refuses them. What the SDK sends is unchanged.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/capture-server.sh"
sdk="${1:?usage: capture-java.sh SDK_GIT_DIR OUT.jsonl}"
out="${2:?usage: capture-java.sh SDK_GIT_DIR OUT.jsonl}"
command -v javac >/dev/null || { echo "capture-java: install default-jdk first" >&2; exit 1; }
jars=(jackson-core jackson-databind jackson-annotations httpclient httpcore commons-logging commons-codec slf4j-api slf4j-simple lombok)
classpath=""
for jar in "${jars[@]}"; do
    [ -f "/usr/share/java/$jar.jar" ] || { echo "capture-java: /usr/share/java/$jar.jar is missing (apt-get install libjackson2-databind-java libhttpclient-java liblombok-java libslf4j-java)" >&2; exit 1; }
    classpath="$classpath/usr/share/java/$jar.jar:"
done
work="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
git --git-dir="$(git -C "$sdk" rev-parse --absolute-git-dir)" archive HEAD SensorsAnalyticsSDK/src/main | tar -x -C "$work"
src="$work/SensorsAnalyticsSDK/src/main/java"
for file in $(grep -rl "JsonProcessingException e)\|JsonProcessingException {" "$src"); do
    sed -i 's/catch (JsonProcessingException e)/catch (java.io.IOException e)/; s/throws InvalidArgumentException, JsonProcessingException {/throws InvalidArgumentException, java.io.IOException {/' "$file"
done
mkdir -p "$work/classes"
javac -nowarn -encoding UTF-8 -d "$work/classes" -cp "$classpath" -processorpath /usr/share/java/lombok.jar \
    $(find "$src" -name '*.java' ! -name 'HelloSensorsAnalytics.java') "$here/capture-java/Capture.java" 2>&1 | grep -v '^Note:' || true
[ -f "$work/classes/Capture.class" ] || { echo "capture-java: the SDK did not compile" >&2; exit 1; }
start_capture_server "$out"
java -cp "$work/classes:$classpath" Capture "http://127.0.0.1:$port"
echo "capture-java: $(wc -l <"$out") requests in $out"

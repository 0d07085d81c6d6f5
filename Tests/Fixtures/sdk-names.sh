#!/usr/bin/env bash
# Prints the `$` names in the official Sensors SDKs' source, one a line, sorted: what
# Sources/Collector/SDKNames.swift lists (less the names it says are not record names).
#   Tests/Fixtures/sdk-names.sh SDK_GIT_DIR…
# Each SDK_GIT_DIR is a clone or bare mirror of a github.com/sensorsdata/sa-sdk-* repository; its
# HEAD's source files are read: quoted `"$Name"` strings, and the minified JS builds' unquoted `{$name:`
# keys and `x.$name=` assignments.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: sdk-names.sh SDK_GIT_DIR…" >&2; exit 2; }
for sdk in "$@"; do
    git --git-dir="$(git -C "$sdk" rev-parse --absolute-git-dir)" grep -h -o -E \
        "([\"'\`]\\\$[A-Za-z_][A-Za-z0-9_]{0,99}[\"'\`]|[{,]\\\$[A-Za-z_][A-Za-z0-9_]{0,99}:|\\.\\\$[A-Za-z_][A-Za-z0-9_]{0,99}=[^=])" HEAD -- \
        '*.java' '*.kt' '*.m' '*.h' '*.swift' '*.js' '*.ts' '*.py' '*.php' '*.rb' '*.go' '*.cpp' '*.cc' '*.c' || true
done | sed -E "s/^[{,.\"'\`]//; s/=.\$//; s/[\"'\`:]\$//" | LC_ALL=C sort -u

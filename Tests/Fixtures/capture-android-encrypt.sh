#!/usr/bin/env bash
# Makes encrypted uploads with the official Android SDK's own encryption classes
# (Tests/Fixtures/sensors/android-sdk-encrypt.jsonl) for two test key pairs made here with openssl
# (Tests/Fixtures/sensors/encryption-test-keys.json: RSA-2048 as pkv 1, EC P-256 as pkv 2; test keys
# only, published on purpose so that tests can decrypt).
#   Tests/Fixtures/capture-android-encrypt.sh SDK_GIT_DIR
# SDK_GIT_DIR is a clone (or bare mirror) of github.com/sensorsdata/sa-sdk-android; EncryptUtils,
# SymmetricEncryptMode and Base64Coder are compiled from its HEAD unmodified with Debian's default-jdk
# and libbcprov-java.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sdk="${1:?usage: capture-android-encrypt.sh SDK_GIT_DIR}"
git_dir="$(git -C "$sdk" rev-parse --absolute-git-dir)"
bc=/usr/share/java/bcprov.jar
[ -f "$bc" ] || { echo "install libbcprov-java first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
for file in module_encrypt/src/main/java/com/sensorsdata/analytics/android/sdk/encrypt/utils/EncryptUtils.java \
            module_encrypt/src/main/java/com/sensorsdata/analytics/android/sdk/encrypt/encryptor/SymmetricEncryptMode.java \
            module_common/src/main/java/com/sensorsdata/analytics/android/sdk/util/Base64Coder.java; do
    mkdir -p "$work/src/$(dirname "$file")"
    git --git-dir="$git_dir" show "HEAD:$file" >"$work/src/$file"
done
javac -nowarn -cp "$bc" -d "$work/classes" $(find "$work/src" "$here/capture-android-encrypt/stubs" -name '*.java') "$here/capture-android-encrypt/Harness.java"

keys="$here/sensors/encryption-test-keys.json"
if [ ! -f "$keys" ]; then
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/rsa.pem" 2>/dev/null
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/ec.pem" 2>/dev/null
    spki() { openssl pkey -in "$1" -pubout -outform DER | base64 -w0; }
    pkcs8() { openssl pkcs8 -topk8 -nocrypt -in "$1" -outform DER | base64 -w0; }
    printf '{"note":"TEST KEYS ONLY: published so that tests can decrypt the Android SDK captures; never use them for anything else","keys":[{"pkv":1,"type":"rsa","publicKey":"%s","privateKeyPKCS8":"%s"},{"pkv":2,"type":"ec","publicKey":"%s","privateKeyPKCS8":"%s"}]}\n' \
        "$(spki "$work/rsa.pem")" "$(pkcs8 "$work/rsa.pem")" "$(spki "$work/ec.pem")" "$(pkcs8 "$work/ec.pem")" >"$keys"
fi
rsa="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["keys"][0]["publicKey"])' "$keys")"
ec="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["keys"][1]["publicKey"])' "$keys")"
java -cp "$work/classes:$bc" Harness "$here/sensors/android-sdk-encrypt.jsonl" 1 RSA "$rsa" 2 EC "$ec"
echo "android-sdk-encrypt: $(wc -l <"$here/sensors/android-sdk-encrypt.jsonl") requests"

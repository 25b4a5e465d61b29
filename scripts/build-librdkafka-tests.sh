#!/usr/bin/env bash
# Builds librdkafka's own test suite (tests/test-runner) from Debian's librdkafka source package, so the broker can be
# checked against the conformance tests librdkafka's authors run against Apache Kafka.
# Output: .cache/librdkafka/src (the source tree, built). Idempotent: does nothing once test-runner exists.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD/.cache/librdkafka"
runner="$root/src/tests/test-runner"
if [ -x "$runner" ]; then
  exit 0
fi
mkdir -p "$root/apt/lists/partial" "$root/download"

# Debian's deb-src index, through a private apt state so the system's apt configuration is untouched.
echo "deb-src http://deb.debian.org/debian bookworm main" > "$root/apt/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$root/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$root/apt/lists")
echo "librdkafka tests: fetching Debian's librdkafka source package"
apt-get "${apt_opts[@]}" update -qq
(cd "$root/download" && apt-get "${apt_opts[@]}" --download-only source librdkafka >/dev/null 2>&1)
tarball=$(ls "$root"/download/librdkafka_*.orig.tar.gz | head -n 1)

rm -rf "$root/src" "$root/extract"
mkdir -p "$root/extract"
tar -xzf "$tarball" -C "$root/extract"
mv "$root"/extract/librdkafka-* "$root/src"
rmdir "$root/extract"

# SASL and GSSAPI are off: the suite runs against a PLAINTEXT listener and libsasl2-dev is not needed.
cd "$root/src"
echo "librdkafka tests: configuring"
./configure --disable-gssapi --disable-sasl > "$root/build.log" 2>&1
echo "librdkafka tests: building the library (a few minutes)"
make -j"$(nproc)" libs >> "$root/build.log" 2>&1
echo "librdkafka tests: building the test runner"
make -j"$(nproc)" -C tests build >> "$root/build.log" 2>&1
test -x "$runner"
echo "librdkafka tests: built $runner"

#!/usr/bin/env bash
# Fills .device/ (ignored by git) with what bench/device/run.sh needs on the device machine and
# its image lacks: the pcre2, xxhash, OpenSSL (the Hub client's TLS) and UCX (P/D KV transfer)
# headers and libraries. (The model shapes and tokenizers the
# benchmarks read are tracked in the repository, configs/ and tests/data/tokenizers/, and travel
# with it.) oneDNN is not carried: libdnnl.so is ~40 MB and a device call carries 64 MiB in all,
# the repository (~50 MB) included, so the device scripts build with -DPAGODA_ONEDNN=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
d=.device/deps
rm -rf "$d" .device/deps.tar.xz
mkdir -p "$d/include" "$d/lib/pkgconfig"
cp /usr/include/pcre2.h /usr/include/xxhash.h "$d/include/"
cp -L /usr/lib/x86_64-linux-gnu/libpcre2-8.so "$d/lib/libpcre2-8.so"
cp -L /usr/lib/x86_64-linux-gnu/libxxhash.so "$d/lib/libxxhash.so"
cp -L /usr/lib/x86_64-linux-gnu/libxxhash.so.0 "$d/lib/libxxhash.so.0"
# OpenSSL 3: the headers (with the multiarch configuration ones) and both libraries.
rm -rf "$d/include/openssl"
cp -r /usr/include/openssl "$d/include/openssl"
cp /usr/include/x86_64-linux-gnu/openssl/* "$d/include/openssl/"
for lib in libssl libcrypto; do
  cp -L /usr/lib/x86_64-linux-gnu/$lib.so.3 "$d/lib/$lib.so.3"
  ln -sf $lib.so.3 "$d/lib/$lib.so"
done
# UCX 1.13 (libucx-dev): its four libraries, headers and pkg-config files, the prefix rewritten by
# device_env.sh as for pcre2. Its transport modules (lib/ucx/*.so) are not carried: the GPU runs
# never move KV over UCX.
rm -rf "$d/include/ucp" "$d/include/ucs" "$d/include/uct" "$d/include/ucm"
cp -r /usr/include/ucp /usr/include/ucs /usr/include/uct /usr/include/ucm "$d/include/"
for lib in libucp libucs libuct libucm; do
  cp -L /usr/lib/x86_64-linux-gnu/$lib.so.0 "$d/lib/$lib.so.0"
  ln -sf $lib.so.0 "$d/lib/$lib.so"
done
for pc in ucx ucx-uct ucx-ucs; do
  sed -e 's|^prefix = .*|prefix = DEPS_PREFIX|' -e 's|^libdir = .*|libdir = ${prefix}/lib|' \
    /usr/lib/x86_64-linux-gnu/pkgconfig/$pc.pc >"$d/lib/pkgconfig/$pc.pc"
done
cat >"$d/lib/pkgconfig/libpcre2-8.pc" <<'PC'
prefix=DEPS_PREFIX
libdir=${prefix}/lib
includedir=${prefix}/include

Name: libpcre2-8
Description: PCRE2 (carried headers, system library)
Version: 10.42
Libs: -L${libdir} -lpcre2-8
Cflags: -I${includedir}
PC
rm -rf .device/configs .device/tokenizers  # older versions of this script copied these here
# Carried compressed (xz: ~3x on the libraries): the working tree and the carried paths share 64
# MiB per device call; device_env.sh, run.sh and serve_bench.sh unpack it there.
tar -C .device -cJf .device/deps.tar.xz deps
rm -rf .device/deps
du -sh .device

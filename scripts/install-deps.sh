#!/bin/sh
# Installs what mist needs to build and test on Debian 12 / Ubuntu 22.04+.
# Runs with no stdin, as root or through sudo. CUDA is not installed here: the
# build uses /usr/local/cuda when it exists and the CPU backend otherwise.
set -eu
PKGS="build-essential autoconf automake pkg-config make openmpi-bin libopenmpi-dev \
libinih-dev liblpsolve55-dev libsuitesparse-dev libopenblas-dev libcmocka-dev python3 help2man librsvg2-bin \
clang libclang-rt-dev"
if [ "$(id -u)" -eq 0 ]; then SUDO=; else SUDO="sudo -n"; fi
missing=
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "mist: installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq </dev/null
    $SUDO apt-get install -y --no-install-recommends $missing </dev/null
fi

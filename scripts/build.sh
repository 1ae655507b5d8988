#!/bin/sh
# Installs dependencies, then configures and builds mist in the source tree.
# Extra arguments go to ./configure (e.g. --without-cuda).
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
    autoreconf -fi
fi
if [ ! -f Makefile ] || [ configure -nt config.status ] || [ $# -gt 0 ]; then
    ./configure "$@"
fi
make -j"$(nproc)"

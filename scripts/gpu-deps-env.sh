# gpu-deps-env.sh - sourced (bash) by the GPU machine's scripts (gpu-run.sh, kern21-device.sh):
# where the machine lacks the build dependencies, unpacks the .deb files of .deps/ (made by
# scripts/gpu-deps.sh, carried with the device run) into /opt/deps (never into /) and points
# pkg-config, the linker and the loader there. Sets deps to a word for the logs: "system" or
# "from .deps (N packages) in /opt/deps". Run from the repository's root.
# Only where the machine lacks them: on a machine with the packages installed, pointing
# pkg-config at /opt/deps would hide the system's own libuv, libyaml and systemd.
if ! pkg-config --exists msgpack openblas check 2>/dev/null && ls .deps/*.deb >/dev/null 2>&1; then
  mkdir -p /opt/deps
  for deb in .deps/*.deb; do
    dpkg -x "$deb" /opt/deps || echo "gpu-deps-env: could not unpack $deb" >&2
  done
  export PKG_CONFIG_LIBDIR=/opt/deps/usr/lib/x86_64-linux-gnu/pkgconfig:/opt/deps/usr/share/pkgconfig:/opt/deps/usr/lib/x86_64-linux-gnu/openblas-pthread/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=/opt/deps
  # libmicrohttpd.pc names gnutls only as Requires.private (static linking): the machine's own
  # libgnutls.so.30 serves the shared library, so a stub .pc is all pkg-config needs here.
  if [ ! -f /opt/deps/usr/lib/x86_64-linux-gnu/pkgconfig/gnutls.pc ]; then
    printf 'Name: gnutls\nDescription: stub for the GPU machine (shared lib from the system)\nVersion: 3.7.9\nLibs:\nCflags:\n' \
      >/opt/deps/usr/lib/x86_64-linux-gnu/pkgconfig/gnutls.pc
  fi
  export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu:/opt/deps/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}
  # msgpack.pc names no -L (its libdir is a system one), so the linker must look there itself
  export LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
  deps="from .deps ($(ls .deps/*.deb | wc -l) packages) in /opt/deps"
else
  deps="system"
fi
export PATH=$PATH:/usr/local/cuda/bin

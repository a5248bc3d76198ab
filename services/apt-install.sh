#!/bin/sh
# Install Debian packages in an image build, the one apt prelude of the images that apt-get FROM
# the base image (services/infra/Dockerfile, services/spark/Dockerfile; build_base_image.sh puts
# this file in both build contexts):
#   COPY apt-install.sh /usr/local/sbin/apt-install
#   RUN apt-install PACKAGE...
# apt-get update, apt-get install --no-install-recommends PACKAGE..., then no package lists,
# .debs, docs or man pages are left in the layer.
#
# DEBIAN_SECURITY (a build arg, so in the environment of RUN): the Debian security archive, added
# to apt's sources unless one is listed already (the debootstrap base lists the main archive
# only); empty or unset: skip it.
set -eu

if [ "$#" -eq 0 ]; then
    echo "usage: apt-install PACKAGE..." >&2
    exit 2
fi

if [ -n "${DEBIAN_SECURITY:-}" ] \
    && ! grep -rqs -- '-security' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    # shellcheck source=/dev/null
    codename="$(. /etc/os-release && echo "$VERSION_CODENAME")"
    echo "deb $DEBIAN_SECURITY $codename-security main" >/etc/apt/sources.list.d/security.list
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "$@" >/dev/null
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/*

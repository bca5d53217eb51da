#!/usr/bin/env bash
# Install a SLURM the cluster tests start on this machine (tests/workflow/real_slurm.py): Debian's
# slurmctld, slurmd, client commands and munge, and two node names for 127.0.0.1 in /etc/hosts
# (the training launcher rendezvouses at the first node's name, as on a cluster). Nothing is
# started or enabled here: the tests start their own daemons with their own files, and stop them.
#
#   sudo bash tools/install_slurm.sh        (Debian or Ubuntu, as root; CI runs it)
#
# Without it the real-SLURM tests skip, saying why.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    echo "install_slurm: needs root (apt-get install, /etc/hosts)" >&2
    exit 1
fi
packages=(slurmctld slurmd slurm-client munge)
if ! dpkg-query -W -f='${Status}\n' "${packages[@]}" 2>/dev/null | grep -qv "install ok installed" \
        && [ "$(dpkg-query -W -f='${Status}\n' "${packages[@]}" 2>/dev/null | wc -l)" -eq "${#packages[@]}" ]; then
    echo "install_slurm: ${packages[*]} already installed"
else
    # policy-rc.d 101: where systemd or sysvinit runs, the packages' scripts must not start the
    # machine's own slurmctld, slurmd or munged
    policy=/usr/sbin/policy-rc.d
    [ -e "$policy" ] && had_policy=1 || had_policy=0
    [ "$had_policy" -eq 1 ] || { printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; }
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${packages[@]}" \
        || { apt-get update -q && apt-get install -y -q --no-install-recommends "${packages[@]}"; }
    [ "$had_policy" -eq 1 ] || rm -f "$policy"
fi
for node in cond-node1 cond-node2; do
    getent hosts "$node" > /dev/null || echo "127.0.0.1 $node" >> /etc/hosts
done
echo "install_slurm: $(slurmd -V), nodes $(getent hosts cond-node1 cond-node2 | awk '{print $2}' | paste -sd' ')"

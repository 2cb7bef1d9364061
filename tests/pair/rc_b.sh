#!/bin/bash
# tools/vm pair: guest B, the server.
. "$(dirname "$0")/../guest/lib.sh"
check "ferroce on the link to the peer" rdma link add fr1 type ferroce netdev eth1
G=$(gid_index fr1 "::ffff:${FERROCE_SELF_IP//./\\.}")
check "ibv_rc_pingpong -c between two guests (server)" timeout 300 ibv_rc_pingpong -d fr1 -g "$G" -c -n 100 -s 4096
finish

#!/bin/bash
# tools/vm pair tests/pair/rc_a.sh tests/pair/rc_b.sh: ferroce in two guests.
# Guest A: the client (retries until B's server is up).
. "$(dirname "$0")/../guest/lib.sh"
check "ferroce on the link to the peer" rdma link add fr1 type ferroce netdev eth1
G=$(gid_index fr1 "::ffff:${FERROCE_SELF_IP//./\\.}")
ok=1
for i in $(seq 60); do
	if timeout 120 ibv_rc_pingpong -d fr1 -g "$G" -c -n 100 -s 4096 "$FERROCE_PEER_IP" >/tmp/cli.log 2>&1; then ok=0; break; fi
	grep -q "Couldn't connect" /tmp/cli.log || break
	sleep 1
done
cat /tmp/cli.log
check "ibv_rc_pingpong -c between two guests (client)" test $ok = 0
finish

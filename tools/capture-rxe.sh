#!/bin/bash
# tools/capture-rxe.sh: capture known-good RoCEv2 packets from the stock
# kernel's rdma_rxe and store them as wire-layer test vectors.
#
#   tools/vm run tools/capture-rxe.sh
#
# Runs as root inside a fresh guest (cwd = the checkout). Two rxe devices talk
# over a veth pair, one end in network namespace "b" (rxe loops traffic to its
# own IP back internally, so a single device would put nothing on a netdev):
#
#   rxa on veth0 (init netns) 10.77.0.1/24 fd77::1/64
#   rxb on veth1 (netns b)    10.77.0.2/24 fd77::2/64
#
# For IPv4 and for IPv6 GIDs it runs ibv_ud_pingpong, ibv_rc_pingpong,
# ib_write_bw, ib_read_bw and ib_atomic_bw (servers on rxb, clients on rxa),
# each under its own dumpcap on veth0 (build/capture/<test>_ipv<v>.pcap). Then
# it keeps one or two packets per (IP version, opcode), checks each ICRC with
# Python's zlib (independently of ferroce), asks tshark how it decodes them and
# writes drivers/ferroce/transport/wire/testdata/rxe_ipv<v>_<opcode>[_2].hex.
# Logs, pcaps and tshark's full decode stay under build/capture/.
# `tools/capture-rxe.sh --extract` redoes only that last step from the pcaps
# already in build/capture/.
set -u
OUT=build/capture
TD=drivers/ferroce/transport/wire/testdata
B=(ip netns exec b)
log() { echo "capture-rxe: $*"; }
die() { echo "capture-rxe: error: $*"; exit 1; }

extract_only=0
[ "${1:-}" = --extract ] && extract_only=1
failed=0
capture() {
	rm -rf "$OUT"
	mkdir -p "$OUT"

	# --- versions, for the provenance notes ---
	{
		echo "date $(date -u +%Y-%m-%d)"
		echo "kernel $(uname -r)"
		for p in rdma-core ibverbs-utils perftest tshark iproute2; do
			echo "$p $(dpkg-query -W -f '${Version}' "$p" 2>/dev/null)"
		done
	} >"$OUT/versions.txt"
	cat "$OUT/versions.txt"

	# --- topology ---
	ip netns add b || die "ip netns add b"
	ip link add veth0 type veth peer name veth1 || die "veth"
	ip link set veth1 netns b
	ip addr add 10.77.0.1/24 dev veth0
	ip -6 addr add fd77::1/64 dev veth0 nodad
	ip link set veth0 up
	"${B[@]}" ip link set lo up
	"${B[@]}" ip addr add 10.77.0.2/24 dev veth1
	"${B[@]}" ip -6 addr add fd77::2/64 dev veth1 nodad
	"${B[@]}" ip link set veth1 up
	ip addr show veth0
	"${B[@]}" ip addr show veth1

	echo "rdma system: $(rdma system)"
	modprobe rdma_rxe || die "modprobe rdma_rxe"
	rdma link add rxa type rxe netdev veth0 || die "rdma link add rxa"
	"${B[@]}" rdma link add rxb type rxe netdev veth1 || die "rdma link add rxb (in netns b)"
	rdma link show
	"${B[@]}" rdma link show

	# gid_index NETNS-PREFIX... DEV ADDR: the RoCE v2 GID index of ADDR on DEV
	gid_index() {
		local dev=$1 addr=$2; shift 2
		local i idx
		for i in $(seq 100); do
			idx=$("$@" ibv_devinfo -v -d "$dev" 2>/dev/null |
				awk -v a="$addr, RoCE v2" 'index($0, a) && /GID\[/ { sub(/.*GID\[ */, ""); sub(/\].*/, ""); print; exit }')
			[ -n "$idx" ] && { echo "$idx"; return 0; }
			sleep 0.2
		done
		return 1
	}
	GA4=$(gid_index rxa ::ffff:10.77.0.1) || die "no IPv4 GID on rxa"
	GA6=$(gid_index rxa fd77::1) || die "no IPv6 GID on rxa"
	GB4=$(gid_index rxb ::ffff:10.77.0.2 "${B[@]}") || die "no IPv4 GID on rxb"
	GB6=$(gid_index rxb fd77::2 "${B[@]}") || die "no IPv6 GID on rxb"
	log "GID indices: rxa v4 $GA4 v6 $GA6; rxb v4 $GB4 v6 $GB6"
	ibv_devinfo -v -d rxa >"$OUT/devinfo-rxa.txt" 2>&1
	"${B[@]}" ibv_devinfo -v -d rxb >"$OUT/devinfo-rxb.txt" 2>&1
	grep -E 'GID|active_mtu|state' "$OUT/devinfo-rxa.txt" "$OUT/devinfo-rxb.txt"

	# --- capture ---
	cap_pid=
	cap_start() { # NAME
		dumpcap -i veth0 -F pcap -f 'udp port 4791' -w "$OUT/$1.pcap" >"$OUT/$1.dumpcap.log" 2>&1 &
		cap_pid=$!
		local i
		for i in $(seq 150); do
			grep -q 'Capturing on' "$OUT/$1.dumpcap.log" 2>/dev/null && [ -s "$OUT/$1.pcap" ] && return 0
			sleep 0.2
		done
		cat "$OUT/$1.dumpcap.log"
		die "dumpcap did not start"
	}
	cap_stop() {
		sleep 1
		kill -INT "$cap_pid"
		wait "$cap_pid"
	}

	# run_pair NAME PORT SERVER-CMD CLIENT-CMD: server in netns b on rxb, client
	# here on rxa; the client starts once the server listens on TCP PORT.
	run_pair() {
		local name=$1 port=$2 scmd=$3 ccmd=$4 i spid cst sst
		echo "$scmd" >"$OUT/$name.cmd"
		echo "$ccmd" >>"$OUT/$name.cmd"
		cap_start "$name"
		"${B[@]}" timeout 120 $scmd >"$OUT/$name.server.log" 2>&1 &
		spid=$!
		for i in $(seq 600); do
			"${B[@]}" ss -ltn | grep -q ":$port " && break
			sleep 0.1
		done
		timeout 120 $ccmd >"$OUT/$name.client.log" 2>&1
		cst=$?
		wait "$spid"
		sst=$?
		cap_stop
		log "$name: client $cst, server $sst: $ccmd"
		if [ "$cst" != 0 ] || [ "$sst" != 0 ]; then
			failed=$((failed + 1))
			sed 's/^/    server: /' "$OUT/$name.server.log" | tail -20
			sed 's/^/    client: /' "$OUT/$name.client.log" | tail -20
		fi
	}

	PEER=10.77.0.2
	port=18600
	for v in 4 6; do
		if [ $v = 4 ]; then ga=$GA4 gb=$GB4; else ga=$GA6 gb=$GB6; fi
		pp() { # NAME TOOL ARGS...: a pingpong on the next port
			local name=$1 tool=$2; shift 2
			port=$((port + 1))
			run_pair "${name}_ipv$v" $port "$tool -d rxb -g $gb -p $port $*" "$tool -d rxa -g $ga -p $port $* $PEER"
		}
		pt() { # NAME TOOL ARGS...: a perftest pair on the next port
			local name=$1 tool=$2; shift 2
			port=$((port + 1))
			run_pair "${name}_ipv$v" $port "$tool -d rxb -x $gb -p $port -F $*" "$tool -d rxa -x $ga -p $port -F $* $PEER"
		}
		pp ud ibv_ud_pingpong -s 61 -n 2
		pp rc_small ibv_rc_pingpong -s 61 -n 2
		pp rc_multi ibv_rc_pingpong -s 3000 -m 1024 -n 1
		pt write_multi ib_write_bw -s 3000 -n 5 -t 5
		pt write_small ib_write_bw -s 61 -n 5 -t 5
		pt read_multi ib_read_bw -s 3000 -n 5 -t 5
		pt read_small ib_read_bw -s 61 -n 5 -t 5
		pt cswap ib_atomic_bw -A CMP_AND_SWAP -n 5 -t 5
		pt fadd ib_atomic_bw -A FETCH_AND_ADD -n 5 -t 5
	done
	log "$failed test pairs failed"
}
[ $extract_only = 1 ] || capture

# --- pick vectors, check them, ask tshark, write testdata ---
python3 - "$OUT" "$TD" <<'PY'
import glob, os, struct, subprocess, sys, zlib

out, td = sys.argv[1], sys.argv[2]
versions = dict(l.split(" ", 1) for l in open(os.path.join(out, "versions.txt")).read().splitlines())

NAMES = {
    0x00: "rc_send_first", 0x01: "rc_send_middle", 0x02: "rc_send_last",
    0x04: "rc_send_only", 0x06: "rc_rdma_write_first", 0x07: "rc_rdma_write_middle",
    0x08: "rc_rdma_write_last", 0x0A: "rc_rdma_write_only", 0x0C: "rc_rdma_read_request",
    0x0D: "rc_rdma_read_response_first", 0x0E: "rc_rdma_read_response_middle",
    0x0F: "rc_rdma_read_response_last", 0x10: "rc_rdma_read_response_only",
    0x11: "rc_acknowledge", 0x12: "rc_atomic_acknowledge", 0x13: "rc_compare_swap",
    0x14: "rc_fetch_add", 0x64: "ud_send_only",
}
# extension headers after the BTH, by opcode: (name, length) in wire order
EXT = {0x64: [("DETH", 8)], 0x06: [("RETH", 16)], 0x0A: [("RETH", 16)], 0x0C: [("RETH", 16)],
       0x0D: [("AETH", 4)], 0x0F: [("AETH", 4)], 0x10: [("AETH", 4)], 0x11: [("AETH", 4)],
       0x12: [("AETH", 4), ("AtomicAckETH", 8)], 0x13: [("AtomicETH", 28)], 0x14: [("AtomicETH", 28)]}

def pcap_frames(path):
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    assert magic in (0xA1B2C3D4, 0xA1B23C4D), f"{path}: not a little-endian pcap"
    linktype = struct.unpack("<I", data[20:24])[0]
    assert linktype == 1, f"{path}: link type {linktype}, want Ethernet"
    off, n = 24, 0
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        frame = data[off + 16:off + 16 + incl]
        off += 16 + incl
        n += 1
        yield n, frame

def ip_packet(frame):
    etype, at = struct.unpack(">H", frame[12:14])[0], 14
    while etype == 0x8100:
        etype, at = struct.unpack(">H", frame[at + 2:at + 4])[0], at + 4
    ip = frame[at:]
    if ip[0] >> 4 == 4:
        return 4, ip[:struct.unpack(">H", ip[2:4])[0]], (ip[0] & 15) * 4
    return 6, ip[:40 + struct.unpack(">H", ip[4:6])[0]], 40

def icrc(ip, v, ihl):
    m = bytearray(ip)
    if v == 4:
        m[1] = m[8] = m[10] = m[11] = 0xFF
    else:
        m[0] |= 0x0F; m[1] = m[2] = m[3] = m[7] = 0xFF
    m[ihl + 6] = m[ihl + 7] = 0xFF
    m[ihl + 8 + 4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(m[:-4])).to_bytes(4, "little")

order = ["ud", "rc_small", "rc_multi", "write_multi", "write_small", "read_multi",
         "read_small", "cswap", "fadd"]
picked, first = [], {}
bad = 0
for v in (4, 6):
    for test in order:
        path = os.path.join(out, f"{test}_ipv{v}.pcap")
        if not os.path.exists(path):
            continue
        cmds = open(os.path.join(out, f"{test}_ipv{v}.cmd")).read().splitlines()
        for n, frame in pcap_frames(path):
            ver, ip, ihl = ip_packet(frame)
            if icrc(ip, ver, ihl) != ip[-4:]:
                print(f"capture-rxe: {path} frame {n}: zlib ICRC mismatch")
                bad += 1
                continue
            op = ip[ihl + 8]
            padcnt = (ip[ihl + 9] >> 4) & 3
            key = (ver, op)
            shape = (len(ip), padcnt)
            if key not in first:
                first[key] = shape
                picked.append((ver, op, "", test, n, cmds, ip, ihl))
            elif first[key] is not None and first[key] != shape:
                first[key] = None
                picked.append((ver, op, "_2", test, n, cmds, ip, ihl))

# one pcap of the picked packets (Ethernet header faked: tshark wants a link layer)
sel = os.path.join(out, "selected.pcap")
with open(sel, "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
    for i, p in enumerate(picked):
        ver, ip = p[0], p[6]
        eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + (b"\x08\x00" if ver == 4 else b"\x86\xdd")
        fr = eth + ip
        f.write(struct.pack("<IIII", i, 0, len(fr), len(fr)) + fr)

FIELDS = ["frame.number", "infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m",
          "infiniband.bth.padcnt", "infiniband.bth.tver", "infiniband.bth.p_key",
          "infiniband.bth.destqp", "infiniband.bth.a", "infiniband.bth.psn",
          "infiniband.deth.q_key", "infiniband.deth.srcqp", "infiniband.reth.va",
          "infiniband.reth.r_key", "infiniband.reth.dmalen", "infiniband.atomiceth.swapdt",
          "infiniband.atomiceth.cmpdt", "infiniband.aeth.syndrome", "infiniband.aeth.msn",
          "infiniband.atomicacketh.origremdt", "data.len", "infiniband.invariant.crc",
          "udp.srcport", "udp.checksum", "udp.checksum.status", "ip.checksum.status",
          "_ws.malformed", "_ws.expert.message"]
KEYS = ["frame", "opcode", "se", "m", "padcnt", "tver", "pkey", "destqp", "a", "psn",
        "qkey", "srcqp", "va", "rkey", "dmalen", "swap", "cmp", "syndrome", "msn", "orig",
        "data", "icrc", "sport", "udpcsum", "udpcsum_status", "ipcsum_status", "malformed", "expert"]
prefs = ["-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE"]
tsv = subprocess.run(["tshark", "-n", "-r", sel, *prefs, "-T", "fields", "-E", "separator=\t",
                      "-E", "occurrence=a", "-E", "aggregator=|"] + sum([["-e", x] for x in FIELDS], []),
                     capture_output=True, text=True, check=True).stdout
with open(os.path.join(out, "selected-decode.txt"), "w") as f:
    f.write(subprocess.run(["tshark", "-n", "-r", sel, *prefs, "-V"], capture_output=True, text=True).stdout)
rows = [dict(zip(KEYS, l.split("\t"))) for l in tsv.splitlines()]
assert len(rows) == len(picked), (len(rows), len(picked))

def num(s):
    s = s.strip()
    if s in ("True", "Set"): return 1
    if s in ("False", "Not set"): return 0
    return int(s, 0)

for f in glob.glob(os.path.join(td, "rxe_*.hex")):
    os.remove(f)
for p, row in zip(picked, rows):
    ver, op, suffix, test, n, cmds, ip, ihl = p
    tp = ip[ihl + 8:-4]
    padcnt = (tp[1] >> 4) & 3
    tshark = []
    for k in ["opcode", "se", "m", "padcnt", "tver", "pkey", "destqp", "a", "psn", "qkey", "srcqp",
              "va", "rkey", "dmalen", "swap", "cmp", "syndrome", "msn", "orig"]:
        if row.get(k, "") != "":
            tshark.append(f"{k}={num(row[k]):#x}")
    tshark.append(f"data={num(row['data']) if row.get('data') else 0}")
    tshark.append(f"icrc={num(row['icrc']):#010x}")
    warn = [x for x in [row.get("malformed", ""), row.get("expert", "")] if x]
    lines = [
        f"# {NAMES.get(op, hex(op)).upper().replace('_', ' ')} (opcode {op:#04x}) over IPv{ver} from the",
        f"# stock kernel's rdma_rxe ({versions['kernel']}, rdma-core {versions['rdma-core']},",
        f"# perftest {versions['perftest']}), captured {versions['date']} by tools/capture-rxe.sh",
        f"# on veth0 (rxa 10.77.0.1/fd77::1 <-> rxb 10.77.0.2/fd77::2 in netns b),",
        f"# frame {n} of {test}_ipv{ver}.pcap; server (rxb) and client (rxa):",
    ] + [f"#   {c}" for c in cmds] + [
        f"# ICRC checked with Python zlib in the guest. tshark {versions['tshark']} decodes",
        "# (data = payload + pad bytes; icrc = the four ICRC bytes read big-endian):",
        "# tshark: " + " ".join(tshark),
        "# tshark warnings: " + ("; ".join(warn) if warn else "none"),
        "# Lines: IP header, UDP header, BTH, " + "".join(f"{e}, " for e, _ in EXT.get(op, [])) +
        "payload (32 bytes a line)" + (", pad" if padcnt else "") + ", ICRC.",
    ]
    def hexline(b):
        h = b.hex()
        return " ".join(h[i:i + 4] for i in range(0, len(h), 4))
    parts = [ip[:ihl], ip[ihl:ihl + 8], tp[:12]]
    at = 12
    for _, ln in EXT.get(op, []):
        parts.append(tp[at:at + ln]); at += ln
    body = tp[at:len(tp) - padcnt]
    for i in range(0, len(body), 32):
        parts.append(body[i:i + 32])
    if padcnt:
        parts.append(tp[len(tp) - padcnt:])
    parts.append(ip[-4:])
    name = f"rxe_ipv{ver}_{NAMES.get(op, f'op{op:02x}')}{suffix}.hex"
    with open(os.path.join(td, name), "w") as f:
        f.write("\n".join(lines + [hexline(x) for x in parts if x]) + "\n")
    print(f"capture-rxe: {name}: {len(ip)} bytes, pad {padcnt}, udp sport {row.get('sport')}, "
          f"udp csum {row.get('udpcsum')} (status {row.get('udpcsum_status')}), ip csum status {row.get('ipcsum_status') or '-'}, "
          f"tshark warnings: {warn or 'none'}")
print(f"capture-rxe: {len(picked)} vectors, {bad} zlib ICRC mismatches")
sys.exit(1 if bad or not picked else 0)
PY
st=$?
ls -l "$TD"
[ "$st" = 0 ] && [ "$failed" = 0 ]

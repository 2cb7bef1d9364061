//! The wire layer against packets captured from the stock kernel's rdma_rxe.
//!
//! `wire/testdata/rxe_ipv{4,6}_<opcode>.hex` are complete RoCEv2 IP packets
//! (IP header to ICRC) that `tools/capture-rxe.sh` captured between two rxe
//! devices in a guest and checked there with Python's zlib; each file also
//! carries, as a `# tshark:` comment line, the header fields tshark decoded
//! from the same bytes. These tests check ferroce's ICRC, parser and emitter
//! against those bytes and against tshark's reading of them, and that the
//! ICRC masks exactly the fields routers and NICs may rewrite.

use std::collections::BTreeMap;
use std::path::Path;

use ferroce_transport::wire::icrc::{self, IpVersion};
use ferroce_transport::wire::packet::{self, TransportPacket};
use ferroce_transport::wire::{AethSyndrome, Error, Opcode, PKey, Position};

/// The PMTU rdma_rxe ran with (a 1500-byte veth): FIRST and MIDDLE packets
/// carry exactly this much.
const PMTU: usize = 1024;

struct Vector {
    name: String,
    version: IpVersion,
    bytes: Vec<u8>,
    /// Fields tshark decoded, from the `# tshark:` line.
    tshark: BTreeMap<String, u64>,
}

impl Vector {
    fn ip_len(&self) -> usize {
        match self.version {
            IpVersion::V4 => usize::from(self.bytes[0] & 0x0F) * 4,
            IpVersion::V6 => 40,
        }
    }

    fn bth_at(&self) -> usize {
        self.ip_len() + 8
    }

    fn field(&self, key: &str) -> Option<u64> {
        self.tshark.get(key).copied()
    }

    fn parsed(&self) -> TransportPacket<'_> {
        let transport = icrc::check(&self.bytes).unwrap_or_else(|e| panic!("{}: {e}", self.name));
        packet::parse(transport).unwrap_or_else(|e| panic!("{}: {e}", self.name))
    }
}

fn parse_hex(text: &str) -> Vec<u8> {
    let hex: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::chars)
        .filter(|c| !c.is_whitespace())
        .collect();
    assert!(hex.len().is_multiple_of(2), "odd number of hex digits");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn parse_tshark(name: &str, text: &str) -> BTreeMap<String, u64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("# tshark:"))
        .unwrap_or_else(|| panic!("{name}: no '# tshark:' line"));
    line.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            let v = match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            };
            (k.to_string(), v.unwrap_or_else(|_| panic!("{name}: bad {kv}")))
        })
        .collect()
}

fn vectors() -> Vec<Vector> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("wire/testdata");
    let mut out: Vec<Vector> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let version = if name.starts_with("rxe_ipv4_") {
                IpVersion::V4
            } else if name.starts_with("rxe_ipv6_") {
                IpVersion::V6
            } else {
                return None;
            };
            if !name.ends_with(".hex") {
                return None;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            Some(Vector {
                tshark: parse_tshark(&name, &text),
                bytes: parse_hex(&text),
                name,
                version,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[test]
fn rxe_vectors_cover_every_opcode_over_ipv4_and_ipv6() {
    let all = vectors();
    let wanted = [
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_MIDDLE,
        Opcode::RC_SEND_LAST,
        Opcode::RC_SEND_ONLY,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_RDMA_WRITE_ONLY,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
        Opcode::RC_COMPARE_SWAP,
        Opcode::RC_FETCH_ADD,
        Opcode::UD_SEND_ONLY,
    ];
    for version in [IpVersion::V4, IpVersion::V6] {
        for op in wanted {
            let n = all
                .iter()
                .filter(|v| v.version == version && v.parsed().headers.bth.opcode == op)
                .count();
            assert!(
                (1..=2).contains(&n),
                "{version:?} opcode {:#04x}: {n} vectors",
                op.0
            );
        }
    }
    assert_eq!(all.len(), 36, "one vector per opcode and IP version");
}

#[test]
fn rxe_vectors_icrc_accepted_and_recomputed() {
    for v in vectors() {
        let parts = icrc::split(&v.bytes).unwrap_or_else(|e| panic!("{}: {e}", v.name));
        assert_eq!(parts.version, v.version, "{}", v.name);
        // The whole capture is the datagram: no link padding was kept.
        let end = v.bytes.len();
        assert_eq!(parts.icrc[..], v.bytes[end - 4..], "{}", v.name);
        assert_eq!(parts.transport, &v.bytes[v.bth_at()..end - 4], "{}", v.name);
        assert_eq!(icrc::check(&v.bytes), Ok(parts.transport), "{}", v.name);
        // The computed ICRC is the captured one, sent least significant
        // byte first; tshark shows the four bytes read in wire order.
        let computed = parts.compute_icrc().unwrap();
        assert_eq!(computed.to_le_bytes(), parts.icrc, "{}", v.name);
        assert_eq!(
            v.field("icrc"),
            Some(u64::from(u32::from_be_bytes(parts.icrc))),
            "{}",
            v.name
        );
        // The per-version helpers and the streaming form agree.
        let (ip, udp) = (parts.ip, parts.udp);
        let direct = match v.version {
            IpVersion::V4 => icrc::icrc_ipv4(ip, udp, parts.transport),
            IpVersion::V6 => icrc::icrc_ipv6(ip, udp, parts.transport),
        };
        assert_eq!(direct, Ok(computed), "{}", v.name);
        let mut streaming = match v.version {
            IpVersion::V4 => icrc::Icrc::start_ipv4(ip, udp, parts.transport),
            IpVersion::V6 => icrc::Icrc::start_ipv6(ip, udp, parts.transport),
        }
        .unwrap();
        for chunk in parts.transport[12..].chunks(100) {
            streaming.update(chunk);
        }
        assert_eq!(streaming.finish(), computed, "{}", v.name);
        // fill() writes the same four bytes into a zeroed trailer.
        let mut copy = v.bytes.clone();
        copy[end - 4..].fill(0);
        assert_eq!(icrc::check(&copy), Err(Error::BadIcrc), "{}", v.name);
        icrc::fill(&mut copy).unwrap();
        assert_eq!(copy, v.bytes, "{}", v.name);
    }
}

#[test]
fn rxe_vectors_parse_matches_tshark() {
    for v in vectors() {
        let pkt = v.parsed();
        let h = &pkt.headers;
        let name = &v.name;
        let bth = &h.bth;
        let t = |k: &str| v.field(k).unwrap_or_else(|| panic!("{name}: tshark has no {k}"));
        assert_eq!(u64::from(bth.opcode.0), t("opcode"), "{name}");
        assert_eq!(u64::from(bth.solicited), t("se"), "{name}");
        assert_eq!(u64::from(bth.mig_req), t("m"), "{name}");
        assert_eq!(u64::from(bth.pad_count), t("padcnt"), "{name}");
        assert_eq!(t("tver"), 0, "{name}");
        assert_eq!(u64::from(bth.pkey.0), t("pkey"), "{name}");
        assert_eq!(u64::from(bth.dest_qp), t("destqp"), "{name}");
        assert_eq!(u64::from(bth.ack_req), t("a"), "{name}");
        assert_eq!(u64::from(bth.psn.value()), t("psn"), "{name}");
        assert!(!bth.fecn && !bth.becn, "{name}");

        // Exactly the extension headers tshark found, with its values.
        assert_eq!(h.deth.is_some(), v.field("qkey").is_some(), "{name}");
        if let Some(d) = h.deth {
            assert_eq!(u64::from(d.q_key), t("qkey"), "{name}");
            assert_eq!(u64::from(d.src_qp), t("srcqp"), "{name}");
        }
        assert_eq!(h.reth.is_some(), v.field("dmalen").is_some(), "{name}");
        if let Some(r) = h.reth {
            assert_eq!(r.va, t("va"), "{name}");
            assert_eq!(u64::from(r.r_key), t("rkey"), "{name}");
            assert_eq!(u64::from(r.dma_len), t("dmalen"), "{name}");
        }
        assert_eq!(h.atomic_eth.is_some(), v.field("swap").is_some(), "{name}");
        if let Some(a) = h.atomic_eth {
            assert_eq!(a.va, t("va"), "{name}");
            assert_eq!(u64::from(a.r_key), t("rkey"), "{name}");
            assert_eq!(a.swap_add, t("swap"), "{name}");
            assert_eq!(a.compare, t("cmp"), "{name}");
        }
        assert_eq!(h.aeth.is_some(), v.field("syndrome").is_some(), "{name}");
        if let Some(a) = h.aeth {
            assert_eq!(u64::from(a.syndrome.to_byte().unwrap()), t("syndrome"), "{name}");
            assert_eq!(u64::from(a.msn), t("msn"), "{name}");
        }
        assert_eq!(h.atomic_ack_eth.is_some(), v.field("orig").is_some(), "{name}");
        if let Some(a) = h.atomic_ack_eth {
            assert_eq!(a.orig_data, t("orig"), "{name}");
        }
        assert!(h.immdt.is_none() && h.ieth.is_none(), "{name}");

        // tshark counts payload and pad together as "data".
        let data = pkt.payload.len() + usize::from(bth.pad_count);
        assert_eq!(data as u64, t("data"), "{name}");
        let transport_len = v.bytes.len() - v.bth_at() - 4;
        assert_eq!(pkt.info.header_len() + data, transport_len, "{name}");
        // Payload lengths follow the PMTU rule rxe applied.
        assert_eq!(pkt.check_pmtu(PMTU), Ok(()), "{name}");
        if matches!(pkt.info.position, Position::First | Position::Middle) {
            assert_eq!(pkt.payload.len(), PMTU, "{name}");
        }
    }
}

#[test]
fn rxe_vectors_reemit_byte_for_byte() {
    for v in vectors() {
        let pkt = v.parsed();
        let transport = &v.bytes[v.bth_at()..v.bytes.len() - 4];
        // Whole packet: headers, payload, zero pad.
        let mut buf = vec![0xA5u8; transport.len() + 8];
        let n = packet::emit(&pkt.headers, pkt.payload, &mut buf).unwrap();
        assert_eq!(&buf[..n], transport, "{}", v.name);
        assert_eq!(
            packet::emit_len(&pkt.headers, pkt.payload.len()),
            Ok(n),
            "{}",
            v.name
        );
        // Headers alone.
        let mut hdr = vec![0xA5u8; pkt.info.header_len()];
        assert_eq!(pkt.headers.emit(&mut hdr), Ok(hdr.len()), "{}", v.name);
        assert_eq!(&hdr[..], &transport[..hdr.len()], "{}", v.name);
    }
}

/// The bits of a RoCEv2 packet the ICRC leaves out (IBTA annex A17): set
/// for every masked bit, from the standard, not from the code under test.
fn masked_bits(v: &Vector) -> Vec<u8> {
    let mut mask = vec![0u8; v.bytes.len()];
    match v.version {
        IpVersion::V4 => {
            mask[1] = 0xFF; // TOS (DSCP, ECN)
            mask[8] = 0xFF; // TTL
            mask[10] = 0xFF; // header checksum
            mask[11] = 0xFF;
        }
        IpVersion::V6 => {
            mask[0] = 0x0F; // traffic class, high nibble
            mask[1] = 0xFF; // traffic class low nibble, flow label
            mask[2] = 0xFF;
            mask[3] = 0xFF;
            mask[7] = 0xFF; // hop limit
        }
    }
    let udp = v.ip_len();
    mask[udp + 6] = 0xFF; // UDP checksum
    mask[udp + 7] = 0xFF;
    mask[v.bth_at() + 4] = 0xFF; // BTH FECN, BECN, Resv6a
    mask
}

#[test]
fn rxe_vectors_icrc_ignores_masked_bits_and_catches_any_other() {
    for v in vectors() {
        let mask = masked_bits(&v);
        let headers_end = v.bth_at() + v.parsed().info.header_len();
        let end = v.bytes.len();
        for at in 0..end {
            // Every bit of the headers and the ICRC; one bit a byte,
            // rotating, in the payload (the CRC is linear: a flipped bit
            // is a flipped bit wherever it sits).
            let bits: Vec<u8> = if at < headers_end || at >= end - 4 {
                (0..8).collect()
            } else {
                vec![(at % 8) as u8]
            };
            for bit in bits {
                let mut copy = v.bytes.clone();
                copy[at] ^= 1 << bit;
                let got = icrc::check(&copy);
                if mask[at] & (1 << bit) != 0 {
                    assert!(got.is_ok(), "{}: masked byte {at} bit {bit}: {got:?}", v.name);
                } else {
                    // Mostly BadIcrc; length, version and protocol bits
                    // break the framing first (BadIp, Truncated).
                    assert!(got.is_err(), "{}: covered byte {at} bit {bit}", v.name);
                }
            }
        }
    }
}

/// RFC 1071 one's-complement sum of `data` added to `sum`.
fn ones_sum(mut sum: u32, data: &[u8]) -> u32 {
    for pair in data.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// The UDP checksum a NIC or a checksumming stack would fill in.
fn udp_checksum(v: &Vector, pkt: &[u8]) -> u16 {
    let ip = v.ip_len();
    let udp_len = usize::from(u16::from_be_bytes([pkt[ip + 4], pkt[ip + 5]]));
    let mut sum = match v.version {
        IpVersion::V4 => ones_sum(0, &pkt[12..20]) + 17 + udp_len as u32,
        IpVersion::V6 => ones_sum(0, &pkt[8..40]) + 17 + udp_len as u32,
    };
    let mut datagram = pkt[ip..ip + udp_len].to_vec();
    datagram[6] = 0;
    datagram[7] = 0;
    sum = ones_sum(sum, &datagram);
    match fold(sum) {
        0 => 0xFFFF,
        c => c,
    }
}

#[test]
fn rxe_vectors_survive_what_routers_and_nics_rewrite() {
    for v in vectors() {
        let ip = v.ip_len();
        let bth = v.bth_at();
        let mut p = v.bytes.clone();
        match v.version {
            IpVersion::V4 => {
                p[1] = 26 << 2 | 0b11; // DSCP AF31, ECN CE
                p[8] = 1; // TTL after a few hops
                p[10] = 0;
                p[11] = 0;
                let csum = fold(ones_sum(0, &p[..ip]));
                p[10..12].copy_from_slice(&csum.to_be_bytes());
                assert_eq!(fold(ones_sum(0, &p[..ip])), 0, "{}", v.name);
            }
            IpVersion::V6 => {
                // Traffic class 0xBB (DSCP 46, ECN CE), flow label 0xABCDE.
                p[0] = 0x60 | 0x0B;
                p[1] = 0xBA;
                p[2] = 0xBC;
                p[3] = 0xDE;
                p[7] = 1; // hop limit
            }
        }
        let csum = udp_checksum(&v, &p);
        p[ip + 6..ip + 8].copy_from_slice(&csum.to_be_bytes());
        p[bth + 4] |= 0xC0; // FECN and BECN
        let transport = icrc::check(&p).unwrap_or_else(|e| panic!("{}: {e}", v.name));
        let pkt = packet::parse(transport).unwrap();
        assert!(pkt.headers.bth.fecn && pkt.headers.bth.becn, "{}", v.name);
        assert_eq!(pkt.payload, v.parsed().payload, "{}", v.name);
        // The rewritten headers still re-emit exactly.
        let mut buf = vec![0u8; transport.len()];
        assert_eq!(
            packet::emit(&pkt.headers, pkt.payload, &mut buf),
            Ok(transport.len())
        );
        assert_eq!(buf, transport, "{}", v.name);

        // One covered byte in each part breaks it: source address, UDP
        // destination port, P_Key, PSN, first byte after the BTH, last
        // byte before the ICRC.
        let src = if v.version == IpVersion::V4 { 12 } else { 8 };
        for at in [src, ip + 2, bth + 2, bth + 11, bth + 12, p.len() - 5] {
            let mut bad = p.clone();
            bad[at] ^= 0x20;
            assert_eq!(
                icrc::check(&bad),
                Err(Error::BadIcrc),
                "{}: byte {at}",
                v.name
            );
        }
    }
}

/// What rdma_rxe put on the wire, beyond what the IBTA requires: the
/// conventions ferroce must accept from it (and may mirror).
#[test]
fn rxe_vectors_show_rxe_wire_conventions() {
    for v in vectors() {
        let pkt = v.parsed();
        let b = &v.bytes;
        let ip = v.ip_len();
        let name = &v.name;
        let udp_src = u16::from_be_bytes([b[ip], b[ip + 1]]);
        let udp_dst = u16::from_be_bytes([b[ip + 2], b[ip + 3]]);
        assert_eq!(udp_dst, icrc::ROCEV2_UDP_PORT, "{name}");
        // Source port 0xC000 + a 14-bit hash of the sending QP number.
        assert!(udp_src >= 0xC000, "{name}: source port {udp_src:#x}");
        // No UDP checksum, IPv6 included.
        assert_eq!(&b[ip + 6..ip + 8], &[0, 0], "{name}");
        match v.version {
            IpVersion::V4 => {
                assert_eq!(b[1], 0, "{name}: TOS"); // traffic class 0
                assert_eq!(b[6] & 0x40, 0x40, "{name}: DF"); // don't fragment
                assert_eq!(b[8], 64, "{name}: TTL");
            }
            IpVersion::V6 => {
                // Traffic class and flow label 0, hop limit 64.
                assert_eq!(&b[..4], &[0x60, 0, 0, 0], "{name}");
                assert_eq!(b[7], 64, "{name}: hop limit");
            }
        }
        let bth = &pkt.headers.bth;
        assert_eq!(bth.pkey, PKey::DEFAULT, "{name}");
        assert!(!bth.mig_req && !bth.solicited, "{name}");
        // Pad bytes are zero.
        let pad = usize::from(bth.pad_count);
        let icrc_at = b.len() - 4;
        assert!(b[icrc_at - pad..icrc_at].iter().all(|&x| x == 0), "{name}");
        // AckReq on the last packet of every RC request, nowhere else.
        let info = pkt.info;
        let want_ack = info.is_request()
            && bth.opcode.0 >> 5 == 0
            && matches!(info.position, Position::Last | Position::Only);
        assert_eq!(bth.ack_req, want_ack, "{name}");
        // ACKs, read responses and atomic ACKs say "ACK, no credit limit".
        if let Some(aeth) = pkt.headers.aeth {
            assert_eq!(aeth.syndrome, AethSyndrome::Ack { credits: 31 }, "{name}");
        }
    }
}

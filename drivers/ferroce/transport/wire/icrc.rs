//! The RoCEv2 invariant CRC (IBTA annex A17, RoCEv2; the CRC of IBTA 7.8).
//!
//! The ICRC is the CRC-32 of IEEE 802.3 (polynomial 0x04C11DB7, reflected,
//! initial value and final XOR all ones: the CRC of Ethernet's FCS and of
//! zlib's `crc32`) computed over
//!
//! 1. eight 0xFF bytes standing for the masked InfiniBand LRH that RoCEv2
//!    does not carry;
//! 2. the IP header with the fields routers may change masked to all ones:
//!    IPv4 Type of Service, Time to Live and Header Checksum; IPv6 Traffic
//!    Class, Flow Label and Hop Limit;
//! 3. the UDP header with its checksum masked to all ones;
//! 4. the BTH with byte 4 (FECN, BECN and the six reserved bits; `Resv8a`
//!    in the IBTA layout) masked to all ones;
//! 5. the rest of the transport packet: extension headers, payload, pad.
//!
//! The 32-bit result is transmitted least significant byte first, as the
//! Ethernet FCS is: the four ICRC bytes are `icrc.to_le_bytes()`. rdma_rxe
//! does the same (`crc32_le` over the same bytes, seeded with the CRC of
//! the eight 0xFF bytes, complemented and stored in CPU order on
//! little-endian hosts).

use super::bth::BTH_LEN;
use super::field;
use super::{Error, Result};

/// Length of the ICRC trailer in bytes.
pub const ICRC_LEN: usize = 4;

/// The UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = super::ip::ROCE_PORT;

use super::ip::{IPPROTO_UDP, IPV4_LEN as IPV4_MIN_LEN, IPV6_LEN, UDP_LEN};
const IPV4_MAX_LEN: usize = 60;

/// Reflected CRC-32 polynomial (0x04C11DB7 bit-reversed).
const POLY: u32 = 0xEDB8_8320;

/// Slicing-by-8 tables: `TABLES[0]` is the classic byte-at-a-time table;
/// `TABLES[k][b]` is the CRC of byte `b` followed by `k` zero bytes.
static TABLES: [[u32; 256]; 8] = build_tables();

// Evaluated at compile time only: an overflow would fail the build.
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
const fn build_tables() -> [[u32; 256]; 8] {
    let mut tables = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = tables[k - 1][i];
            tables[k][i] = (prev >> 8) ^ tables[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    tables
}

/// `TABLES[K][low byte of x]`.
#[inline(always)]
fn t<const K: usize>(x: u32) -> u32 {
    // K < 8 and the index is masked to 0..=255: the lookups always hit.
    TABLES
        .get(K)
        .and_then(|table| table.get((x & 0xFF) as usize))
        .copied()
        .unwrap_or(0)
}

/// An incremental CRC-32 (IEEE 802.3, reflected), fed piece by piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crc32 {
    /// The running register, before the final complement.
    state: u32,
}

impl Default for Crc32 {
    fn default() -> Self {
        Crc32::new()
    }
}

impl Crc32 {
    /// A CRC with nothing fed yet.
    pub const fn new() -> Crc32 {
        Crc32 { state: !0 }
    }

    /// Feeds `data`, eight bytes at a time where possible.
    pub fn update(&mut self, data: &[u8]) {
        let mut crc = self.state;
        let (words, tail) = data.as_chunks::<8>();
        for w in words {
            let lo = crc ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
            crc = t::<7>(lo)
                ^ t::<6>(lo >> 8)
                ^ t::<5>(lo >> 16)
                ^ t::<4>(lo >> 24)
                ^ t::<3>(hi)
                ^ t::<2>(hi >> 8)
                ^ t::<1>(hi >> 16)
                ^ t::<0>(hi >> 24);
        }
        for &b in tail {
            crc = (crc >> 8) ^ t::<0>(crc ^ u32::from(b));
        }
        self.state = crc;
    }

    /// The CRC of everything fed so far.
    pub const fn finish(&self) -> u32 {
        !self.state
    }
}

/// CRC-32 (IEEE 802.3) of `data`; equal to zlib's `crc32(0, data)`.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = Crc32::new();
    crc.update(data);
    crc.finish()
}

/// Bit-at-a-time reference CRC, for cross-checking the tables.
#[cfg(test)]
fn crc32_bitwise(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// An ICRC computation in progress: the masked pseudo header is already in,
/// the caller feeds the bytes after the BTH (possibly in several pieces, as
/// they sit in a fragmented socket buffer) and calls [`Icrc::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icrc {
    crc: Crc32,
}

impl Icrc {
    /// Starts the ICRC of an IPv4 packet. `ip` starts with the IPv4 header
    /// (its length is taken from IHL, options included), `udp` with the UDP
    /// header, `bth` with the BTH; longer slices are fine.
    pub fn start_ipv4(ip: &[u8], udp: &[u8], bth: &[u8]) -> Result<Icrc> {
        let version_ihl = field::read_u8(ip, 0);
        let ihl = usize::from(version_ihl & 0x0F).saturating_mul(4);
        if version_ihl >> 4 != 4 || ihl < IPV4_MIN_LEN {
            return Err(Error::BadIp);
        }
        let mut hdr = [0u8; IPV4_MAX_LEN];
        let hdr = hdr.get_mut(..ihl).ok_or(Error::BadIp)?;
        let src = ip.get(..ihl).ok_or(Error::Truncated)?;
        // (zip, not copy_from_slice: no length-mismatch panic path in the kernel)
        for (d, s) in hdr.iter_mut().zip(src) {
            *d = *s;
        }
        field::write_u8(hdr, 1, 0xFF); // TOS (DSCP, ECN)
        field::write_u8(hdr, 8, 0xFF); // TTL
        field::write_be16(hdr, 10, 0xFFFF); // header checksum
        Self::start(hdr, udp, bth)
    }

    /// Starts the ICRC of an IPv6 packet. `ip` starts with the 40-byte
    /// fixed IPv6 header (extension headers are not supported by RoCEv2
    /// peers and are not covered), `udp` with the UDP header, `bth` with
    /// the BTH.
    pub fn start_ipv6(ip: &[u8], udp: &[u8], bth: &[u8]) -> Result<Icrc> {
        let mut hdr: [u8; IPV6_LEN] = *ip.first_chunk().ok_or(Error::Truncated)?;
        if hdr[0] >> 4 != 6 {
            return Err(Error::BadIp);
        }
        // Version kept; Traffic Class and Flow Label all ones.
        hdr[0] |= 0x0F;
        hdr[1] = 0xFF;
        hdr[2] = 0xFF;
        hdr[3] = 0xFF;
        hdr[7] = 0xFF; // Hop Limit
        Self::start(&hdr, udp, bth)
    }

    fn start(ip: &[u8], udp: &[u8], bth: &[u8]) -> Result<Icrc> {
        let mut udp: [u8; UDP_LEN] = *udp.first_chunk().ok_or(Error::Truncated)?;
        udp[6] = 0xFF; // checksum
        udp[7] = 0xFF;
        let mut bth: [u8; BTH_LEN] = *bth.first_chunk().ok_or(Error::Truncated)?;
        bth[4] = 0xFF; // FECN, BECN, Resv6a
        let mut crc = Crc32::new();
        crc.update(&[0xFF; 8]);
        crc.update(ip);
        crc.update(&udp);
        crc.update(&bth);
        Ok(Icrc { crc })
    }

    /// Feeds the bytes that follow the BTH.
    pub fn update(&mut self, data: &[u8]) {
        self.crc.update(data);
    }

    /// Feeds the bytes that follow the BTH through `feed` (another
    /// implementation of the same CRC-32 register update).
    pub fn update_with(&mut self, data: &[u8], feed: CrcFeed<'_>) {
        self.crc.state = feed(self.crc.state, data);
    }

    /// The ICRC; its wire bytes are `to_le_bytes()`.
    pub const fn finish(&self) -> u32 {
        self.crc.finish()
    }
}

/// A CRC-32 register update: the register before the final complement and
/// the bytes to feed in, giving the new register (the kernel's `crc32_le`,
/// which is accelerated where the CPU allows). The glue passes one to
/// compute the bulk of an ICRC; the masked headers always go through
/// [`Crc32`].
pub type CrcFeed<'f> = &'f dyn Fn(u32, &[u8]) -> u32;

fn icrc_with(version: IpVersion, ip: &[u8], udp: &[u8], transport: &[u8], feed: Option<CrcFeed<'_>>) -> Result<u32> {
    let mut icrc = match version {
        IpVersion::V4 => Icrc::start_ipv4(ip, udp, transport)?,
        IpVersion::V6 => Icrc::start_ipv6(ip, udp, transport)?,
    };
    let rest = transport.get(BTH_LEN..).ok_or(Error::Truncated)?;
    match feed {
        Some(f) => icrc.update_with(rest, f),
        None => icrc.update(rest),
    }
    Ok(icrc.finish())
}

/// The ICRC of a RoCEv2/IPv4 packet given its IPv4 header, UDP header and
/// transport packet (BTH onward, pad included, ICRC excluded).
pub fn icrc_ipv4(ip: &[u8], udp: &[u8], transport: &[u8]) -> Result<u32> {
    let mut icrc = Icrc::start_ipv4(ip, udp, transport)?;
    icrc.update(transport.get(BTH_LEN..).ok_or(Error::Truncated)?);
    Ok(icrc.finish())
}

/// The ICRC of a RoCEv2/IPv6 packet given its IPv6 header, UDP header and
/// transport packet (BTH onward, pad included, ICRC excluded).
pub fn icrc_ipv6(ip: &[u8], udp: &[u8], transport: &[u8]) -> Result<u32> {
    let mut icrc = Icrc::start_ipv6(ip, udp, transport)?;
    icrc.update(transport.get(BTH_LEN..).ok_or(Error::Truncated)?);
    Ok(icrc.finish())
}

/// IP version of a RoCEv2 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// A complete RoCEv2 IP packet cut into its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RocePacket<'a> {
    /// The IP version.
    pub version: IpVersion,
    /// The IP header (IPv4 options included).
    pub ip: &'a [u8],
    /// The 8-byte UDP header.
    pub udp: &'a [u8],
    /// BTH onward, up to the ICRC (what [`super::packet::parse`] takes).
    pub transport: &'a [u8],
    /// The ICRC as carried.
    pub icrc: [u8; ICRC_LEN],
}

/// Offsets of the parts of a RoCEv2 IP packet: (version, ip header length,
/// end of the UDP datagram).
fn layout(packet: &[u8]) -> Result<(IpVersion, usize, usize)> {
    let first = *packet.first().ok_or(Error::Truncated)?;
    let (version, ip_len, ip_end, protocol) = match first >> 4 {
        4 => {
            let ihl = usize::from(first & 0x0F).saturating_mul(4);
            let total = usize::from(field::read_be16(packet, 2));
            (IpVersion::V4, ihl, total, field::read_u8(packet, 9))
        }
        6 => {
            let payload = usize::from(field::read_be16(packet, 4));
            let total = IPV6_LEN.checked_add(payload).ok_or(Error::BadIp)?;
            (IpVersion::V6, IPV6_LEN, total, field::read_u8(packet, 6))
        }
        _ => return Err(Error::BadIp),
    };
    if packet.len() < ip_len.max(IPV4_MIN_LEN) {
        return Err(Error::Truncated);
    }
    if ip_len < IPV4_MIN_LEN || protocol != IPPROTO_UDP || ip_end < ip_len {
        return Err(Error::BadIp);
    }
    if packet.len() < ip_end {
        return Err(Error::Truncated);
    }
    let udp = packet.get(ip_len..ip_end).ok_or(Error::BadIp)?;
    let udp_len = usize::from(field::read_be16(udp, 4));
    if udp.len() < UDP_LEN {
        return Err(Error::Truncated);
    }
    if udp_len > udp.len() {
        return Err(Error::BadIp);
    }
    let min = UDP_LEN + BTH_LEN + ICRC_LEN;
    if udp_len < min {
        return Err(Error::Truncated);
    }
    let end = ip_len.checked_add(udp_len).ok_or(Error::BadIp)?;
    Ok((version, ip_len, end))
}

/// Cuts a complete RoCEv2 packet (starting at the IP header, no link
/// header) into IP header, UDP header, transport packet and ICRC. The
/// datagram ends where the UDP length says (link-layer padding after it is
/// ignored); the IP length must cover it. The UDP port is not checked.
pub fn split(packet: &[u8]) -> Result<RocePacket<'_>> {
    let (version, ip_len, end) = layout(packet)?;
    let datagram = packet.get(..end).ok_or(Error::Truncated)?;
    let (ip, rest) = datagram.split_at_checked(ip_len).ok_or(Error::Truncated)?;
    let (udp, rest) = rest.split_at_checked(UDP_LEN).ok_or(Error::Truncated)?;
    let transport_len = rest.len().checked_sub(ICRC_LEN).ok_or(Error::Truncated)?;
    let (transport, icrc) = rest
        .split_at_checked(transport_len)
        .ok_or(Error::Truncated)?;
    Ok(RocePacket {
        version,
        ip,
        udp,
        transport,
        icrc: *icrc.first_chunk().ok_or(Error::Truncated)?,
    })
}

impl RocePacket<'_> {
    /// The ICRC computed over this packet.
    pub fn compute_icrc(&self) -> Result<u32> {
        icrc_with(self.version, self.ip, self.udp, self.transport, None)
    }

    /// [`RocePacket::compute_icrc`] with the bulk fed through `feed`.
    pub fn compute_icrc_with(&self, feed: CrcFeed<'_>) -> Result<u32> {
        icrc_with(self.version, self.ip, self.udp, self.transport, Some(feed))
    }

    /// `Ok` when the carried ICRC is the computed one, [`Error::BadIcrc`]
    /// otherwise.
    pub fn check_icrc(&self) -> Result<()> {
        if self.compute_icrc()?.to_le_bytes() == self.icrc {
            Ok(())
        } else {
            Err(Error::BadIcrc)
        }
    }

    /// [`RocePacket::check_icrc`] with the bulk fed through `feed`.
    pub fn check_icrc_with(&self, feed: CrcFeed<'_>) -> Result<()> {
        if self.compute_icrc_with(feed)?.to_le_bytes() == self.icrc {
            Ok(())
        } else {
            Err(Error::BadIcrc)
        }
    }
}

/// Checks the ICRC of a complete RoCEv2 IP packet and returns its transport
/// packet (BTH onward, ICRC excluded) for [`super::packet::parse`].
pub fn check(packet: &[u8]) -> Result<&[u8]> {
    let parts = split(packet)?;
    parts.check_icrc()?;
    Ok(parts.transport)
}

/// Computes the ICRC of a complete RoCEv2 IP packet whose last four UDP
/// payload bytes are reserved for it, and writes it there. The IP and UDP
/// lengths must already be final.
pub fn fill(packet: &mut [u8]) -> Result<()> {
    fill_inner(packet, None)
}

/// [`fill`] with the bulk fed through `feed`.
pub fn fill_with(packet: &mut [u8], feed: CrcFeed<'_>) -> Result<()> {
    fill_inner(packet, Some(feed))
}

fn fill_inner(packet: &mut [u8], feed: Option<CrcFeed<'_>>) -> Result<()> {
    let (_, _, end) = layout(packet)?;
    let p = split(packet)?;
    let icrc = icrc_with(p.version, p.ip, p.udp, p.transport, feed)?;
    let at = end.checked_sub(ICRC_LEN).ok_or(Error::Truncated)?;
    let dst = packet.get_mut(at..end).ok_or(Error::Truncated)?;
    // (zip, not copy_from_slice: no length-mismatch panic path in the kernel)
    for (d, s) in dst.iter_mut().zip(icrc.to_le_bytes()) {
        *d = s;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        // The CRC-32/ISO-HDLC check value (CRC catalogue): crc("123456789").
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        // The seed rdma_rxe uses: the raw register after eight 0xFF bytes.
        let mut lrh = Crc32::new();
        lrh.update(&[0xFF; 8]);
        assert_eq!(lrh.state, 0xDEBB_20E3);
    }

    /// RoCEv2 CNP (opcode 0x81) captured on a Mellanox ConnectX-4 Lx, IPv4,
    /// from the Ethernet frame in scapy's `test/contrib/roce.uts` ("RoCE CNP
    /// captured on ConnectX-4 Lx"), Ethernet header removed. Data bytes only.
    /// Hardware-generated, so it checks our masking and byte order against
    /// a real NIC. Also in `testdata/cnp_cx4lx_ipv4.hex`.
    const CNP_CX4LX_IPV4: [u8; 60] = [
        0x45, 0xC2, 0x00, 0x3C, 0x71, 0x8C, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, // IPv4
        0x0A, 0x00, 0x11, 0x01, 0x0A, 0x00, 0x12, 0x01, //
        0x00, 0x00, 0x12, 0xB7, 0x00, 0x28, 0x00, 0x00, // UDP
        0x81, 0x00, 0xFF, 0xFF, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, // BTH
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // CNP reserved
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x82, 0xFD, 0x00, 0x2A, // ICRC
    ];

    /// UC SEND ONLY over IPv4 (pad count 2, MigReq) with the ICRC computed
    /// by scapy's independent RoCE implementation: the packet and its ICRC
    /// 0x78f353f3 are the "RoCE layer" case of scapy's
    /// `test/contrib/roce.uts`, serialized by hand from the field values.
    const UC_SEND_ONLY_SCAPY_IPV4: [u8; 64] = [
        0x45, 0x01, 0x00, 0x40, 0x04, 0x78, 0x40, 0x00, 0x40, 0x11, 0xB4, 0xD5, // IPv4
        0xC0, 0xA8, 0x00, 0x07, 0xC0, 0xA8, 0x00, 0x07, //
        0xC0, 0x00, 0x12, 0xB7, 0x00, 0x2C, 0xAC, 0xA2, // UDP
        0x24, 0x60, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0xD3, 0x00, 0xCF, 0x17, 0x10, // BTH
        0x46, 0x30, 0x81, 0x8B, 0xE2, 0x89, 0x35, 0xD9, 0x0E, 0x9A, // payload
        0x95, 0x50, 0x54, 0x01, 0xBE, 0x88, 0x5E, 0x50, //
        0x00, 0x00, // pad
        0x78, 0xF3, 0x53, 0xF3, // ICRC
    ];

    /// RC SEND ONLY "ferroce!" over IPv6 (traffic class 0x68, flow label
    /// 0x12345, hop limit 64). No public IPv6 capture was found: the ICRC
    /// was computed independently with Python's `zlib.crc32` over
    /// `b"\xff" * 8 + masked IPv6 header + masked UDP header + masked BTH
    /// + payload`, appended little-endian (script in `testdata/README`).
    const RC_SEND_ONLY_ZLIB_IPV6: [u8; 72] = [
        0x66, 0x81, 0x23, 0x45, 0x00, 0x20, 0x11, 0x40, // IPv6
        0x20, 0x01, 0x0D, 0xB8, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
        0x20, 0x01, 0x0D, 0xB8, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, //
        0xC1, 0x23, 0x12, 0xB7, 0x00, 0x20, 0x12, 0x34, // UDP
        0x04, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x2A, // BTH
        b'f', b'e', b'r', b'r', b'o', b'c', b'e', b'!', // payload
        0xF8, 0x45, 0xA8, 0xD4, // ICRC
    ];

    #[test]
    fn icrc_testdata_file_matches_inline_vector() {
        let text = include_str!("testdata/cnp_cx4lx_ipv4.hex");
        let hex: std::string::String = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .flat_map(str::chars)
            .filter(|c| !c.is_whitespace())
            .collect();
        let bytes: std::vec::Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(bytes, CNP_CX4LX_IPV4);
    }

    #[test]
    fn icrc_matches_connectx4_cnp_capture() {
        let transport = check(&CNP_CX4LX_IPV4).unwrap();
        assert_eq!(transport, &CNP_CX4LX_IPV4[28..56]);
        let parts = split(&CNP_CX4LX_IPV4).unwrap();
        assert_eq!(parts.version, IpVersion::V4);
        assert_eq!(parts.compute_icrc(), Ok(0x2A00_FD82));
        let icrc = icrc_ipv4(&CNP_CX4LX_IPV4[..20], &CNP_CX4LX_IPV4[20..28], transport);
        assert_eq!(icrc.map(u32::to_le_bytes), Ok([0x82, 0xFD, 0x00, 0x2A]));
        let pkt = super::super::packet::parse(transport).unwrap();
        assert_eq!(pkt.info.operation, super::super::Operation::Cnp);
        assert_eq!(pkt.dest_qp(), 0x118);
        assert!(pkt.headers.bth.becn);
    }

    #[test]
    fn icrc_matches_scapy_uc_send_only() {
        let transport = check(&UC_SEND_ONLY_SCAPY_IPV4).unwrap();
        let pkt = super::super::packet::parse(transport).unwrap();
        assert_eq!(pkt.headers.bth.opcode, super::super::Opcode::UC_SEND_ONLY);
        assert_eq!(pkt.payload.len(), 18);
        assert_eq!(pkt.headers.bth.psn.value(), 13_571_856);
    }

    #[test]
    fn icrc_matches_zlib_ipv6() {
        let transport = check(&RC_SEND_ONLY_ZLIB_IPV6).unwrap();
        assert_eq!(
            split(&RC_SEND_ONLY_ZLIB_IPV6).unwrap().version,
            IpVersion::V6
        );
        assert_eq!(
            super::super::packet::parse(transport).unwrap().payload,
            b"ferroce!"
        );
        let icrc = icrc_ipv6(
            &RC_SEND_ONLY_ZLIB_IPV6[..40],
            &RC_SEND_ONLY_ZLIB_IPV6[40..48],
            transport,
        );
        assert_eq!(icrc, Ok(0xD4A8_45F8));
    }

    /// Every byte offset of `packet` whose value does not enter the ICRC.
    fn masked_offsets(v6: bool) -> std::vec::Vec<usize> {
        let (ip, bth) = if v6 { (40, 48) } else { (20, 28) };
        let mut masked = if v6 {
            std::vec![0, 1, 2, 3, 7]
        } else {
            std::vec![1, 8, 10, 11]
        };
        masked.extend([ip + 6, ip + 7, bth + 4]);
        masked
    }

    #[test]
    fn icrc_masks_exactly_the_variant_fields() {
        for (packet, v6) in [
            (&CNP_CX4LX_IPV4[..], false),
            (&UC_SEND_ONLY_SCAPY_IPV4[..], false),
            (&RC_SEND_ONLY_ZLIB_IPV6[..], true),
        ] {
            let masked = masked_offsets(v6);
            let end = packet.len() - ICRC_LEN;
            for at in 0..end {
                let mut copy = packet.to_vec();
                // The IPv6 version nibble and the lengths are covered but
                // must stay consistent for `split` to accept the packet.
                let flip = if v6 && at == 0 { 0x0F } else { 0x01 };
                copy[at] ^= flip;
                let structural = (!v6 && (at == 0 || at == 2 || at == 3 || at == 9))
                    || (v6 && (at == 4 || at == 5 || at == 6))
                    || at == (if v6 { 44 } else { 24 })
                    || at == (if v6 { 45 } else { 25 });
                if structural {
                    continue;
                }
                let expected = if masked.contains(&at) {
                    Ok(())
                } else {
                    Err(Error::BadIcrc)
                };
                assert_eq!(
                    split(&copy).and_then(|p| p.check_icrc()),
                    expected,
                    "offset {at} v6 {v6}"
                );
            }
        }
    }

    #[test]
    fn icrc_fill_then_check() {
        let mut packet = UC_SEND_ONLY_SCAPY_IPV4;
        packet[60..].fill(0);
        assert_eq!(check(&packet), Err(Error::BadIcrc));
        fill(&mut packet).unwrap();
        assert_eq!(packet, UC_SEND_ONLY_SCAPY_IPV4);
        // Link-layer padding after the datagram is ignored.
        let mut padded = std::vec::Vec::from(&CNP_CX4LX_IPV4[..]);
        padded.extend([0xEE; 6]);
        assert!(check(&padded).is_ok());
    }

    #[test]
    fn icrc_streaming_matches_one_shot() {
        let p = &RC_SEND_ONLY_ZLIB_IPV6;
        let mut icrc = Icrc::start_ipv6(&p[..40], &p[40..48], &p[48..60]).unwrap();
        icrc.update(b"ferr");
        icrc.update(b"oce!");
        assert_eq!(icrc.finish(), 0xD4A8_45F8);
    }

    #[test]
    fn icrc_rejects_malformed_framing() {
        assert_eq!(check(&[]), Err(Error::Truncated));
        assert_eq!(check(&CNP_CX4LX_IPV4[..59]), Err(Error::Truncated));
        let mut p = CNP_CX4LX_IPV4;
        p[0] = 0x55; // IPv5
        assert_eq!(check(&p), Err(Error::BadIp));
        let mut p = CNP_CX4LX_IPV4;
        p[0] = 0x44; // IHL 16 bytes
        assert_eq!(check(&p), Err(Error::BadIp));
        let mut p = CNP_CX4LX_IPV4;
        p[9] = 6; // TCP
        assert_eq!(check(&p), Err(Error::BadIp));
        let mut p = CNP_CX4LX_IPV4;
        p[25] = 0x29; // UDP length beyond the IP packet
        assert_eq!(check(&p), Err(Error::BadIp));
        let mut p = CNP_CX4LX_IPV4;
        p[25] = 0x17; // UDP length too short for BTH + ICRC
        assert_eq!(check(&p), Err(Error::Truncated));
        assert_eq!(
            Icrc::start_ipv4(&[0x45; 19], &[0; 8], &[0; 12]),
            Err(Error::Truncated)
        );
        assert_eq!(
            Icrc::start_ipv6(&[0x60; 40], &[0; 7], &[0; 12]),
            Err(Error::Truncated)
        );
        assert_eq!(
            Icrc::start_ipv6(&[0x40; 40], &[0; 8], &[0; 12]),
            Err(Error::BadIp)
        );
        assert_eq!(
            icrc_ipv4(&CNP_CX4LX_IPV4[..20], &CNP_CX4LX_IPV4[20..28], &[0; 11]),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn icrc_with_an_outside_feed_equals_the_table_icrc() {
        // A feed that is another implementation of the register update
        // (bit by bit) gives the same ICRC, check and fill as the tables.
        let bitwise = |reg: u32, data: &[u8]| -> u32 {
            let mut c = reg;
            for &b in data {
                c ^= u32::from(b);
                for _ in 0..8 {
                    c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
                }
            }
            c
        };
        for p in [&CNP_CX4LX_IPV4[..], &UC_SEND_ONLY_SCAPY_IPV4[..], &RC_SEND_ONLY_ZLIB_IPV6[..]] {
            let parts = split(p).unwrap();
            assert_eq!(parts.compute_icrc_with(&bitwise).unwrap(), parts.compute_icrc().unwrap());
            parts.check_icrc_with(&bitwise).unwrap();
            let mut q = p.to_vec();
            let n = q.len();
            q[n - 1] ^= 0xff;
            assert_eq!(split(&q).unwrap().check_icrc_with(&bitwise), Err(Error::BadIcrc));
            fill_with(&mut q, &bitwise).unwrap();
            assert_eq!(p, &q[..]);
        }
    }

    #[test]
    fn crc32_slicing_matches_bitwise_for_all_lengths_and_splits() {
        let data: std::vec::Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(167) ^ (i >> 3)) as u8)
            .collect();
        for len in 0..data.len() {
            let expected = crc32_bitwise(&data[..len]);
            assert_eq!(crc32(&data[..len]), expected, "len {len}");
            let split = len / 3;
            let mut crc = Crc32::new();
            crc.update(&data[..split]);
            crc.update(&data[split..len]);
            assert_eq!(crc.finish(), expected, "len {len} split {split}");
        }
    }
}

//! The IP and UDP headers around a RoCEv2 transport packet: IPv4 (RFC 791),
//! IPv6 (RFC 8200) and UDP (RFC 768) to port 4791 (IBTA annex A17).
//!
//! ```text
//!  IPv4 (20 bytes, more with options)     IPv6 (40 bytes)
//!   0     version 4, IHL                   0..3   version 6, traffic class, flow label
//!   1     TOS (DSCP, ECN)                  4..5   payload length
//!   2..3  total length                     6      next header (17, UDP)
//!   4..5  identification                   7      hop limit
//!   6..7  flags (DF), fragment offset      8..23  source address
//!   8     TTL                             24..39  destination address
//!   9     protocol (17, UDP)
//!  10..11 header checksum                 UDP (8 bytes)
//!  12..15 source address                   0..1   source port
//!  16..19 destination address              2..3   destination port (4791)
//!                                          4..5   length
//!                                          6..7   checksum
//! ```
//!
//! [`IpHeader`] reads what the receive side needs of a header it did not
//! write (version, addresses); [`IpUdpRepr`] writes both headers in front
//! of a transport packet; the checksums are here as well, so that no byte
//! offset of these headers is left to the kernel glue.

use super::field;
use super::{Error, Result};

/// Length of an IPv4 header without options.
pub const IPV4_LEN: usize = 20;
/// Length of an IPv6 header (RoCEv2 uses no extension headers).
pub const IPV6_LEN: usize = 40;
/// Length of a UDP header.
pub const UDP_LEN: usize = 8;
/// IP protocol / next header number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// The UDP destination port of RoCEv2 (IANA).
pub const ROCE_PORT: u16 = 4791;

/// IPv4 flags and fragment offset of every packet ferroce sends: DF, not a
/// fragment.
const IPV4_DF: u16 = 0x4000;

/// A zero-copy view of the IP header at the start of `buffer`, IPv4 or
/// IPv6 as its version field says.
///
/// INVARIANT: `buffer` holds the whole header: [`IPV6_LEN`] bytes for
/// version 6, IHL * 4 (at least [`IPV4_LEN`]) for version 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IpHeader<T> {
    /// Wraps `buffer`: [`Error::BadIp`] for a version other than 4 or 6 or
    /// an IHL below 5, [`Error::Truncated`] if the header does not fit.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        let first = *b.first().ok_or(Error::Truncated)?;
        let len = match first >> 4 {
            4 => {
                let ihl = usize::from(first & 0x0F).saturating_mul(4);
                if ihl < IPV4_LEN {
                    return Err(Error::BadIp);
                }
                ihl
            }
            6 => IPV6_LEN,
            _ => return Err(Error::BadIp),
        };
        field::check_len(b, len)?;
        Ok(IpHeader { buffer })
    }

    /// Whether the header is IPv6.
    pub fn is_ipv6(&self) -> bool {
        field::read_u8(self.buffer.as_ref(), 0) >> 4 == 6
    }

    /// The header's length in bytes (IPv4 options included).
    pub fn header_len(&self) -> usize {
        if self.is_ipv6() {
            IPV6_LEN
        } else {
            usize::from(field::read_u8(self.buffer.as_ref(), 0) & 0x0F).saturating_mul(4)
        }
    }

    /// The source address: 4 bytes for IPv4, 16 for IPv6.
    pub fn src_addr(&self) -> &[u8] {
        let at = if self.is_ipv6() { 8..24 } else { 12..16 };
        self.buffer.as_ref().get(at).unwrap_or(&[])
    }

    /// The destination address: 4 bytes for IPv4, 16 for IPv6.
    pub fn dst_addr(&self) -> &[u8] {
        let at = if self.is_ipv6() { 24..40 } else { 16..20 };
        self.buffer.as_ref().get(at).unwrap_or(&[])
    }
}

/// A zero-copy view of a UDP header at the start of `buffer`.
///
/// INVARIANT: `buffer` holds at least [`UDP_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpHeader<T> {
    /// Wraps `buffer`; [`Error::Truncated`] if it is shorter than the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        field::check_len(buffer.as_ref(), UDP_LEN)?;
        Ok(UdpHeader { buffer })
    }

    /// The source port (RoCEv2: a hash of the flow, for ECMP).
    pub fn src_port(&self) -> u16 {
        field::read_be16(self.buffer.as_ref(), 0)
    }

    /// The destination port ([`ROCE_PORT`] for RoCEv2).
    pub fn dst_port(&self) -> u16 {
        field::read_be16(self.buffer.as_ref(), 2)
    }

    /// The datagram's length, header included.
    pub fn length(&self) -> u16 {
        field::read_be16(self.buffer.as_ref(), 4)
    }

    /// The checksum (0 over IPv4: none).
    pub fn checksum(&self) -> u16 {
        field::read_be16(self.buffer.as_ref(), 6)
    }
}

/// The IP and UDP headers of a packet ferroce sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpUdpRepr {
    /// IPv6 (else IPv4, whose addresses are the first 4 bytes of `src`, `dst`).
    pub ipv6: bool,
    /// IPv4 TOS or IPv6 traffic class.
    pub tclass: u8,
    /// IPv6 flow label (20 bits; ignored for IPv4).
    pub flow_label: u32,
    /// IPv4 TTL or IPv6 hop limit.
    pub hop_limit: u8,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// IPv4 identification (ignored for IPv6).
    pub ip_id: u16,
    /// UDP source port; the destination is [`ROCE_PORT`].
    pub src_port: u16,
}

impl IpUdpRepr {
    /// Length of the IP header this writes.
    pub const fn ip_len(ipv6: bool) -> usize {
        if ipv6 {
            IPV6_LEN
        } else {
            IPV4_LEN
        }
    }

    /// Length of both headers this writes.
    pub const fn header_len(ipv6: bool) -> usize {
        if ipv6 {
            IPV6_LEN + UDP_LEN
        } else {
            IPV4_LEN + UDP_LEN
        }
    }

    /// Writes the IP and UDP headers of an IP packet of `total` bytes (IP
    /// header to ICRC) at the start of `buf`, which holds at least the
    /// headers (the packet itself, or a buffer for its headers alone). The
    /// IPv4 header checksum is filled in; the UDP checksum is 0 (see
    /// [`fill_udp6_checksum`] for IPv6, which requires one, computed last
    /// because the ICRC masks it). [`Error::Truncated`] if `buf` cannot
    /// hold the headers or `total` is shorter than they are,
    /// [`Error::FieldRange`] if `total` is too long for the length fields.
    pub fn emit(&self, buf: &mut [u8], total: usize) -> Result<()> {
        let ip_len = Self::ip_len(self.ipv6);
        field::check_len(buf, Self::header_len(self.ipv6))?;
        let udp_len = total.checked_sub(ip_len).ok_or(Error::Truncated)?;
        if udp_len < UDP_LEN {
            return Err(Error::Truncated);
        }
        let udp_len = u16::try_from(udp_len).map_err(|_| Error::FieldRange)?;
        let b = &mut *buf;
        if self.ipv6 {
            let vtf = (6u32 << 28) | (u32::from(self.tclass) << 20) | (self.flow_label & 0xF_FFFF);
            field::write_be32(b, 0, vtf);
            field::write_be16(b, 4, udp_len);
            field::write_u8(b, 6, IPPROTO_UDP);
            field::write_u8(b, 7, self.hop_limit);
            write_bytes(b, 8, &self.src);
            write_bytes(b, 24, &self.dst);
        } else {
            let tot = u16::try_from(total).map_err(|_| Error::FieldRange)?;
            field::write_u8(b, 0, 0x45);
            field::write_u8(b, 1, self.tclass);
            field::write_be16(b, 2, tot);
            field::write_be16(b, 4, self.ip_id);
            field::write_be16(b, 6, IPV4_DF);
            field::write_u8(b, 8, self.hop_limit);
            field::write_u8(b, 9, IPPROTO_UDP);
            field::write_be16(b, 10, 0);
            write_bytes(b, 12, self.src.get(..4).unwrap_or(&[]));
            write_bytes(b, 16, self.dst.get(..4).unwrap_or(&[]));
            // The IP layer computes it again on its way out, but the local
            // path delivers this header as is, and verbs consumers (e.g.
            // ibv_init_ah_from_wc) read the GRH it becomes.
            let c = ipv4_checksum(b.get(..IPV4_LEN).unwrap_or(&[]));
            field::write_be16(b, 10, c);
        }
        let udp = b.get_mut(ip_len..).ok_or(Error::Truncated)?;
        field::write_be16(udp, 0, self.src_port);
        field::write_be16(udp, 2, ROCE_PORT);
        field::write_be16(udp, 4, udp_len);
        field::write_be16(udp, 6, 0);
        Ok(())
    }
}

/// Copies `src` to `buf[at..]`; the caller checked the length.
fn write_bytes(buf: &mut [u8], at: usize, src: &[u8]) {
    if let Some(d) = buf.get_mut(at..at.saturating_add(src.len())) {
        d.copy_from_slice(src);
    }
}

/// The one's-complement sum of `bytes` as big-endian 16-bit words (an odd
/// last byte padded with zero), added to `sum` (a u64 cannot wrap: a
/// packet has fewer than 2^48 words).
fn ones_sum(mut sum: u64, bytes: &[u8]) -> u64 {
    let mut it = bytes.chunks_exact(2);
    for w in &mut it {
        if let [a, b] = w {
            sum = sum.wrapping_add(u64::from(u16::from_be_bytes([*a, *b])));
        }
    }
    if let [last] = it.remainder() {
        sum = sum.wrapping_add(u64::from(u16::from_be_bytes([*last, 0])));
    }
    sum
}

fn fold(mut sum: u64) -> u16 {
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF).wrapping_add(sum >> 16);
    }
    sum as u16
}

/// The IPv4 header checksum (RFC 791) of `hdr`, whose checksum field is 0.
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    !fold(ones_sum(0, hdr))
}

/// The UDP checksum of `datagram` (UDP header, checksum field 0, and
/// payload) over IPv6 from `src` to `dst` (RFC 8200 section 8.1). A sum of
/// 0 is sent as 0xFFFF: 0 means "no checksum", which IPv6 forbids.
pub fn udp6_checksum(src: &[u8; 16], dst: &[u8; 16], datagram: &[u8]) -> u16 {
    let mut sum = ones_sum(0, src);
    sum = ones_sum(sum, dst);
    sum = ones_sum(sum, &(datagram.len() as u32).to_be_bytes());
    sum = ones_sum(sum, &[0, 0, 0, IPPROTO_UDP]);
    sum = ones_sum(sum, datagram);
    match !fold(sum) {
        0 => 0xFFFF,
        c => c,
    }
}

/// Computes the UDP checksum of a finished IPv6 RoCEv2 packet (IP header
/// first, ICRC already in place) and writes it into its UDP header.
pub fn fill_udp6_checksum(packet: &mut [u8]) -> Result<()> {
    let hdr = IpHeader::new_checked(&*packet)?;
    if !hdr.is_ipv6() {
        return Err(Error::BadIp);
    }
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(hdr.src_addr());
    dst.copy_from_slice(hdr.dst_addr());
    let datagram = packet.get_mut(IPV6_LEN..).ok_or(Error::Truncated)?;
    field::check_len(datagram, UDP_LEN)?;
    field::write_be16(datagram, 6, 0);
    let c = udp6_checksum(&src, &dst, datagram);
    field::write_be16(datagram, 6, c);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut x = [0u8; 16];
        x[..4].copy_from_slice(&a);
        x
    }

    #[test]
    fn ipv4_checksum_of_a_known_header() {
        // A header with its checksum 0xB861 (the usual worked example).
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xC0, 0xA8, 0x00, 0x01, 0xC0, 0xA8, 0x00, 0xC7,
        ];
        assert_eq!(ipv4_checksum(&h), 0xB861);
        h[10..12].copy_from_slice(&0xB861u16.to_be_bytes());
        // A header with its checksum in place sums to 0xFFFF.
        assert_eq!(ipv4_checksum(&h), 0);
    }

    #[test]
    fn ipv4_emit_fields_at_rfc791_positions() {
        let r = IpUdpRepr {
            ipv6: false,
            tclass: 0x02,
            flow_label: 0xF_FFFF,
            hop_limit: 64,
            src: v4([10, 0, 2, 15]),
            dst: v4([10, 0, 2, 16]),
            ip_id: 0x1234,
            src_port: 0xC001,
        };
        let mut p = [0xAAu8; 20 + 8 + 16];
        let n = p.len();
        r.emit(&mut p, n).unwrap();
        assert_eq!(&p[..10], &[0x45, 0x02, 0, 44, 0x12, 0x34, 0x40, 0x00, 64, 17]);
        assert_eq!(&p[12..20], &[10, 0, 2, 15, 10, 0, 2, 16]);
        assert_eq!(ipv4_checksum(&p[..20]), 0, "checksum in place");
        assert_eq!(&p[20..28], &[0xC0, 0x01, 0x12, 0xB7, 0, 24, 0, 0]);
        assert_eq!(&p[28..], &[0xAA; 16], "the transport packet is not touched");
        let h = IpHeader::new_checked(&p[..]).unwrap();
        assert!(!h.is_ipv6());
        assert_eq!((h.header_len(), h.src_addr(), h.dst_addr()), (20, &[10, 0, 2, 15][..], &[10, 0, 2, 16][..]));
        let u = UdpHeader::new_checked(&p[20..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.length(), u.checksum()), (0xC001, ROCE_PORT, 24, 0));
    }

    #[test]
    fn ipv6_emit_and_udp_checksum() {
        let src = [0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let dst = [0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let r = IpUdpRepr { ipv6: true, tclass: 0xAB, flow_label: 0x1_2345, hop_limit: 7, src, dst, ip_id: 9, src_port: 0xD000 };
        let mut p = [0x55u8; 40 + 8 + 33];
        let n = p.len();
        r.emit(&mut p, n).unwrap();
        assert_eq!(&p[..8], &[0x6A, 0xB1, 0x23, 0x45, 0, 41, 17, 7]);
        assert_eq!((&p[8..24], &p[24..40]), (&src[..], &dst[..]));
        assert_eq!(&p[40..48], &[0xD0, 0x00, 0x12, 0xB7, 0, 41, 0, 0]);
        fill_udp6_checksum(&mut p).unwrap();
        let c = UdpHeader::new_checked(&p[40..]).unwrap().checksum();
        assert_ne!(c, 0);
        // The receiver's check: the sum over pseudo-header and datagram,
        // checksum included, is 0xFFFF (its complement 0).
        let mut sum = ones_sum(0, &src);
        sum = ones_sum(sum, &dst);
        sum = ones_sum(sum, &41u32.to_be_bytes());
        sum = ones_sum(sum, &[0, 0, 0, 17]);
        sum = ones_sum(sum, &p[40..]);
        assert_eq!(fold(sum), 0xFFFF);
        let h = IpHeader::new_checked(&p[..]).unwrap();
        assert!(h.is_ipv6());
        assert_eq!((h.header_len(), h.src_addr(), h.dst_addr()), (40, &src[..], &dst[..]));
    }

    #[test]
    fn ip_header_rejects_what_it_cannot_read() {
        assert_eq!(IpHeader::new_checked(&[][..]).err(), Some(Error::Truncated));
        assert_eq!(IpHeader::new_checked(&[0x55u8; 40][..]).err(), Some(Error::BadIp), "version 5");
        assert_eq!(IpHeader::new_checked(&[0x44u8; 40][..]).err(), Some(Error::BadIp), "IHL 4");
        assert_eq!(IpHeader::new_checked(&[0x45u8; 19][..]).err(), Some(Error::Truncated));
        assert_eq!(IpHeader::new_checked(&[0x60u8; 39][..]).err(), Some(Error::Truncated));
        // IHL 10 (options): 40 bytes, still IPv4; the addresses are where
        // IPv4 has them, not where IPv6 would.
        let mut h = [0u8; 40];
        h[0] = 0x4A;
        h[12..16].copy_from_slice(&[1, 2, 3, 4]);
        let v = IpHeader::new_checked(&h[..]).unwrap();
        assert!(!v.is_ipv6());
        assert_eq!((v.header_len(), v.src_addr()), (40, &[1, 2, 3, 4][..]));
        assert_eq!(IpHeader::new_checked(&h[..39]).err(), Some(Error::Truncated));
        assert_eq!(UdpHeader::new_checked(&[0u8; 7][..]).err(), Some(Error::Truncated));
    }

    #[test]
    fn emit_refuses_short_and_oversized_packets() {
        let r = IpUdpRepr { ipv6: false, tclass: 0, flow_label: 0, hop_limit: 1, src: [0; 16], dst: [0; 16], ip_id: 0, src_port: 1 };
        assert_eq!(r.emit(&mut [0u8; 27], 100), Err(Error::Truncated), "no room for the headers");
        assert_eq!(r.emit(&mut [0u8; 28], 27), Err(Error::Truncated), "a packet shorter than its headers");
        assert_eq!(r.emit(&mut [0u8; 28], 65536), Err(Error::FieldRange));
        let mut h = [0u8; 28];
        r.emit(&mut h, 1000).unwrap();
        assert_eq!((&h[2..4], &h[24..26]), (&1000u16.to_be_bytes()[..], &980u16.to_be_bytes()[..]), "headers of a longer packet");
        let r6 = IpUdpRepr { ipv6: true, ..r };
        assert_eq!(r6.emit(&mut [0u8; 47], 100), Err(Error::Truncated));
        assert_eq!(r6.emit(&mut [0u8; 48], 40 + 65536), Err(Error::FieldRange));
        assert_eq!(fill_udp6_checksum(&mut [0x45u8; 60]), Err(Error::BadIp));
    }
}

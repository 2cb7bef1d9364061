//! Deterministic fuzz-style test of the wire layer on stable Rust.
//!
//! Feeds random byte strings and mutated valid packets (every implemented
//! opcode, random fields, random payloads, IPv4 and IPv6 framing) into
//! `wire::packet::parse` and the ICRC functions. Properties: nothing panics;
//! whatever parses re-emits to something that parses to the same value;
//! valid packets round-trip exactly; a single flipped bit in an ICRC-covered
//! byte is always detected. The cargo-fuzz target in `fuzz/` runs the same
//! entry points under libFuzzer on nightly.

use ferroce_transport::wire::aeth::AethSyndrome;
use ferroce_transport::wire::icrc;
use ferroce_transport::wire::packet::{self, Headers};
use ferroce_transport::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, Error, ExtHeader, FethRepr, IethRepr,
    ImmDtRepr, Opcode, PKey, Position, Psn, RethRepr,
};

/// xorshift64*: small, fast, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bool(&mut self) -> bool {
        self.next() & 1 != 0
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next() as u8;
        }
    }
}

fn implemented_opcodes() -> Vec<Opcode> {
    (0..=u8::MAX)
        .map(Opcode)
        .filter(|op| op.info().is_ok())
        .collect()
}

fn random_headers(rng: &mut Rng, opcode: Opcode) -> Headers {
    let info = opcode.info().unwrap();
    let mut h = Headers::new(BthRepr {
        opcode,
        solicited: rng.bool(),
        mig_req: rng.bool(),
        pad_count: 0,
        pkey: PKey(rng.next() as u16),
        fecn: rng.bool(),
        becn: rng.bool(),
        dest_qp: rng.next() as u32 & 0xFF_FFFF,
        ack_req: rng.bool(),
        psn: Psn::new(rng.next() as u32),
    });
    for ext in info.headers.iter() {
        match ext {
            ExtHeader::Deth => {
                h.deth = Some(DethRepr {
                    q_key: rng.next() as u32,
                    src_qp: rng.next() as u32 & 0xFF_FFFF,
                })
            }
            ExtHeader::Feth => {
                h.feth = Some(FethRepr {
                    placement: rng.next() as u8 & 0xf,
                    selectivity: rng.next() as u8 & 0x3,
                })
            }
            ExtHeader::Reth => {
                h.reth = Some(RethRepr {
                    va: rng.next(),
                    r_key: rng.next() as u32,
                    dma_len: rng.next() as u32,
                })
            }
            ExtHeader::AtomicEth => {
                h.atomic_eth = Some(AtomicEthRepr {
                    va: rng.next(),
                    r_key: rng.next() as u32,
                    swap_add: rng.next(),
                    compare: rng.next(),
                })
            }
            ExtHeader::Aeth => {
                h.aeth = Some(AethRepr {
                    syndrome: AethSyndrome::from_byte(rng.next() as u8),
                    msn: rng.next() as u32 & 0xFF_FFFF,
                })
            }
            ExtHeader::AtomicAckEth => {
                h.atomic_ack_eth = Some(AtomicAckEthRepr {
                    orig_data: rng.next(),
                })
            }
            ExtHeader::ImmDt => {
                h.immdt = Some(ImmDtRepr {
                    imm: rng.next() as u32,
                })
            }
            ExtHeader::Ieth => {
                h.ieth = Some(IethRepr {
                    r_key: rng.next() as u32,
                })
            }
            ExtHeader::CnpReserved => {}
        }
    }
    h
}

fn random_payload(rng: &mut Rng, opcode: Opcode) -> Vec<u8> {
    let info = opcode.info().unwrap();
    if !info.payload {
        return Vec::new();
    }
    let len = match info.position {
        Position::First | Position::Middle => 4 * (1 + rng.below(64)),
        Position::Last => 1 + rng.below(256),
        Position::Only => rng.below(256),
    };
    let mut payload = vec![0; len];
    rng.fill(&mut payload);
    payload
}

/// Wraps a transport packet in IPv4 or IPv6 + UDP and fills the ICRC.
fn frame(rng: &mut Rng, transport: &[u8], v6: bool) -> Vec<u8> {
    let udp_len = 8 + transport.len() + icrc::ICRC_LEN;
    let mut p = Vec::new();
    if v6 {
        p.extend([
            0x60 | (rng.next() as u8 & 0xF),
            rng.next() as u8,
            rng.next() as u8,
            rng.next() as u8,
        ]);
        p.extend((udp_len as u16).to_be_bytes());
        p.extend([17, rng.next() as u8]);
        let mut addrs = [0u8; 32];
        rng.fill(&mut addrs);
        p.extend(addrs);
    } else {
        let total = 20 + udp_len;
        p.extend([0x45, rng.next() as u8]);
        p.extend((total as u16).to_be_bytes());
        let mut rest = [0u8; 16];
        rng.fill(&mut rest);
        rest[5] = 17; // protocol
        p.extend(rest);
    }
    p.extend((rng.next() as u16).to_be_bytes());
    p.extend(4791u16.to_be_bytes());
    p.extend((udp_len as u16).to_be_bytes());
    p.extend((rng.next() as u16).to_be_bytes());
    p.extend(transport);
    p.extend([0; 4]);
    icrc::fill(&mut p).unwrap();
    p
}

/// Parses `bytes` and, if it is accepted, checks that re-emitting what was
/// parsed yields a packet that parses to the same value.
fn parse_and_reemit(bytes: &[u8]) -> bool {
    let Ok(pkt) = packet::parse(bytes) else {
        return false;
    };
    assert!(pkt.payload.len() <= bytes.len());
    let mut out = vec![0u8; bytes.len() + 8];
    let n = packet::emit(&pkt.headers, pkt.payload, &mut out).expect("re-emit of a parsed packet");
    assert_eq!(n, bytes.len());
    let again = packet::parse(&out[..n]).expect("re-parse");
    assert_eq!(again, pkt);
    true
}

fn icrc_no_panic(bytes: &[u8]) {
    let _ = icrc::check(bytes);
    if let Ok(parts) = icrc::split(bytes) {
        let _ = parts.check_icrc();
        let _ = packet::parse(parts.transport);
    }
    let mut copy = bytes.to_vec();
    let _ = icrc::fill(&mut copy);
}

/// Iterations: `default`, or FERROCE_FUZZ_ITERS for long runs (`make fuzz`).
fn iterations(default: usize) -> usize {
    std::env::var("FERROCE_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn wire_fuzz_random_bytes() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let opcodes = implemented_opcodes();
    let mut accepted = 0;
    let mut buf = vec![0u8; 256];
    for i in 0..iterations(200_000) {
        let len = rng.below(buf.len());
        rng.fill(&mut buf[..len]);
        // Half the time start with a real opcode and TVer 0, so the
        // interesting paths past the opcode check get exercised.
        if i % 2 == 0 && len >= 2 {
            buf[0] = opcodes[rng.below(opcodes.len())].0;
            buf[1] &= 0xF0;
        }
        if parse_and_reemit(&buf[..len]) {
            accepted += 1;
        }
        if i % 4 == 0 {
            if len > 0 {
                buf[0] = if rng.bool() { 0x45 } else { 0x60 };
            }
            icrc_no_panic(&buf[..len]);
        }
    }
    assert!(accepted > 1_000, "only {accepted} random packets accepted");
}

#[test]
fn wire_fuzz_valid_packets_round_trip_and_mutations() {
    let mut rng = Rng(0x0123_4567_89AB_CDEF);
    let opcodes = implemented_opcodes();
    assert_eq!(opcodes.len(), 40);
    let mut out = vec![0u8; 512];
    for i in 0..iterations(200_000) / 5 {
        let opcode = opcodes[i % opcodes.len()];
        let headers = random_headers(&mut rng, opcode);
        let payload = random_payload(&mut rng, opcode);
        let n = packet::emit(&headers, &payload, &mut out).unwrap();
        assert_eq!(n % 4, 0);
        let bytes = out[..n].to_vec();
        let pkt = packet::parse(&bytes).unwrap();
        assert_eq!(pkt.payload, &payload[..]);
        let mut expected = headers;
        expected.bth.pad_count = ferroce_transport::wire::pad_count(payload.len());
        assert_eq!(pkt.headers, expected);
        assert_eq!(pkt.info, opcode.info().unwrap());

        // Framed, the ICRC checks out and the transport comes back intact.
        let v6 = rng.bool();
        let framed = frame(&mut rng, &bytes, v6);
        assert_eq!(icrc::check(&framed), Ok(&bytes[..]));

        // A flipped bit in a covered byte is always caught.
        let ip_len = if v6 { 40 } else { 20 };
        let bth_at = ip_len + 8;
        let at = bth_at + rng.below(n);
        if at != bth_at + 4 {
            let mut bad = framed.clone();
            bad[at] ^= 1 << rng.below(8);
            assert_eq!(icrc::check(&bad), Err(Error::BadIcrc));
        }

        // Mutations of the transport packet: must never panic.
        for _ in 0..4 {
            let mut m = bytes.clone();
            match rng.below(4) {
                0 => {
                    let at = rng.below(m.len());
                    m[at] ^= 1 << rng.below(8);
                }
                1 => m.truncate(rng.below(m.len())),
                2 => m.extend((0..1 + rng.below(8)).map(|_| rng.next() as u8)),
                _ => {
                    let at = rng.below(m.len().min(12));
                    m[at] = rng.next() as u8;
                }
            }
            parse_and_reemit(&m);
            let mut f = framed.clone();
            let at = rng.below(f.len());
            f[at] = rng.next() as u8;
            icrc_no_panic(&f);
            f.truncate(rng.below(f.len()));
            icrc_no_panic(&f);
        }
    }
}

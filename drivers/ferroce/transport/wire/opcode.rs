//! The BTH opcode table (IBTA vol. 1 ch. 9; RoCEv2 annex A17 for CNP).
//!
//! Bits 7:5 of the opcode select the transport (000 RC, 001 UC, 010 RD,
//! 011 UD, 100 CNP, 101 XRC, 11x manufacturer specific), bits 4:0 the
//! operation. For each implemented opcode the table records which extension
//! headers follow the BTH (always in the canonical order of [`ExtHeader`]),
//! the packet's position in its message, whether it carries a payload, and
//! the properties the requester, responder and completer dispatch on. The
//! vocabulary follows the IBTA and rdma_rxe's `rxe_opcode.c`.

use super::{Error, Result};

/// A raw BTH opcode. Any `u8` can be held; [`Opcode::info`] decodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

impl Opcode {
    // Reliable Connection (000xxxxx).
    /// RC SEND FIRST (0x00).
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    /// RC SEND MIDDLE (0x01).
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    /// RC SEND LAST (0x02).
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    /// RC SEND LAST WITH IMMEDIATE (0x03).
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    /// RC SEND ONLY (0x04).
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    /// RC SEND ONLY WITH IMMEDIATE (0x05).
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    /// RC RDMA WRITE FIRST (0x06).
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    /// RC RDMA WRITE MIDDLE (0x07).
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    /// RC RDMA WRITE LAST (0x08).
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    /// RC RDMA WRITE LAST WITH IMMEDIATE (0x09).
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    /// RC RDMA WRITE ONLY (0x0A).
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0A);
    /// RC RDMA WRITE ONLY WITH IMMEDIATE (0x0B).
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0B);
    /// RC RDMA READ REQUEST (0x0C).
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0C);
    /// RC RDMA READ RESPONSE FIRST (0x0D).
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    /// RC RDMA READ RESPONSE MIDDLE (0x0E).
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    /// RC RDMA READ RESPONSE LAST (0x0F).
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    /// RC RDMA READ RESPONSE ONLY (0x10).
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    /// RC ACKNOWLEDGE (0x11).
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    /// RC ATOMIC ACKNOWLEDGE (0x12).
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    /// RC COMPARE SWAP (0x13).
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    /// RC FETCH ADD (0x14).
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    /// RC SEND LAST WITH INVALIDATE (0x16).
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    /// RC SEND ONLY WITH INVALIDATE (0x17).
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    /// RC FLUSH (IBTA 1.5).
    pub const RC_FLUSH: Opcode = Opcode(0x1C);
    /// RC ATOMIC WRITE (IBTA 1.5).
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1D);
    // Unreliable Connection (001xxxxx).
    /// UC SEND FIRST (0x20).
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    /// UC SEND MIDDLE (0x21).
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    /// UC SEND LAST (0x22).
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    /// UC SEND LAST WITH IMMEDIATE (0x23).
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    /// UC SEND ONLY (0x24).
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    /// UC SEND ONLY WITH IMMEDIATE (0x25).
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    /// UC RDMA WRITE FIRST (0x26).
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    /// UC RDMA WRITE MIDDLE (0x27).
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    /// UC RDMA WRITE LAST (0x28).
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    /// UC RDMA WRITE LAST WITH IMMEDIATE (0x29).
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    /// UC RDMA WRITE ONLY (0x2A).
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2A);
    /// UC RDMA WRITE ONLY WITH IMMEDIATE (0x2B).
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2B);
    // Unreliable Datagram (011xxxxx).
    /// UD SEND ONLY (0x64).
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    /// UD SEND ONLY WITH IMMEDIATE (0x65).
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);
    /// RoCEv2 Congestion Notification Packet (annex A17.9.3).
    pub const CNP: Opcode = Opcode(0x81);

    /// The UC opcode of an RC SEND or RDMA WRITE opcode (the two ranges
    /// differ only in the transport bits); any other opcode is returned
    /// unchanged.
    pub const fn uc(self) -> Opcode {
        if self.0 <= Self::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.0 {
            Opcode(self.0 | 0x20)
        } else {
            self
        }
    }

    /// The decoded table entry, or why the opcode cannot be handled:
    /// [`Error::ReservedOpcode`] for codes the IBTA leaves undefined,
    /// [`Error::UnsupportedOpcode`] for defined ones this engine does not
    /// implement (RD, XRC, RESYNC, FLUSH, ATOMIC WRITE, vendor opcodes).
    /// (One load from a table built at compile time: every packet asks,
    /// several times on its way.)
    pub fn info(self) -> Result<OpcodeInfo> {
        // The table has an entry for every u8, so `get` always finds one (the
        // compiler removes the other arm); that arm answers what the entry
        // holds anyway.
        match OPCODES.get(usize::from(self.0)) {
            Some(info) => *info,
            None => lookup(self.0),
        }
    }
}

/// `lookup` of every opcode, computed at compile time.
static OPCODES: [Result<OpcodeInfo>; 256] = build_opcodes();

// Evaluated at compile time only (the static above is its one caller): an
// index out of bounds or an overflow would fail the build.
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
const fn build_opcodes() -> [Result<OpcodeInfo>; 256] {
    let mut t = [Err(Error::ReservedOpcode(0)); 256];
    let mut i = 0;
    while i < 256 {
        t[i] = lookup(i as u8);
        i += 1;
    }
    t
}

/// Transport service of an opcode (BTH opcode bits 7:5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connection.
    Rc,
    /// Unreliable Connection.
    Uc,
    /// Unreliable Datagram.
    Ud,
    /// RoCEv2 congestion notification (not a transport service proper).
    Cnp,
}

/// What a packet does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (any variant: plain, with immediate, with invalidate).
    Send,
    /// RDMA WRITE (plain or with immediate).
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response (carries data and, except MIDDLE, an AETH).
    RdmaReadResponse,
    /// ACKNOWLEDGE: ACK, RNR NAK or NAK, per the AETH syndrome.
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE (AETH and AtomicAckETH).
    AtomicAcknowledge,
    /// CmpSwap atomic request.
    CompareSwap,
    /// FetchAdd atomic request.
    FetchAdd,
    /// FLUSH request (FETH and RETH; answered by an empty READ response).
    Flush,
    /// ATOMIC WRITE request (RETH and 8 bytes written at once; answered by
    /// an empty READ response).
    AtomicWrite,
    /// Congestion notification.
    Cnp,
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The whole message in one packet (also single-packet operations
    /// such as ACKs, READ requests, atomics and CNPs).
    Only,
}

/// An extension header that may follow the BTH.
///
/// The declaration order is the order on the wire: whenever an opcode
/// carries several, they appear in this order (e.g. RETH before ImmDt for
/// RDMA WRITE ONLY WITH IMMEDIATE, AETH before AtomicAckETH).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtHeader {
    /// Datagram ETH: Q_Key, source QP (8 bytes).
    Deth,
    /// FLUSH ETH: placement type, selectivity level (4 bytes).
    Feth,
    /// RDMA ETH: VA, R_Key, DMA length (16 bytes).
    Reth,
    /// Atomic ETH: VA, R_Key, swap/add, compare (28 bytes).
    AtomicEth,
    /// ACK ETH: syndrome, MSN (4 bytes).
    Aeth,
    /// Atomic ACK ETH: original remote data (8 bytes).
    AtomicAckEth,
    /// Immediate data (4 bytes).
    ImmDt,
    /// Invalidate ETH: R_Key to invalidate (4 bytes).
    Ieth,
    /// The 16 reserved bytes that follow the BTH of a CNP.
    CnpReserved,
}

impl ExtHeader {
    /// All extension headers in wire order.
    pub const ALL: [ExtHeader; 9] = [
        ExtHeader::Deth,
        ExtHeader::Feth,
        ExtHeader::Reth,
        ExtHeader::AtomicEth,
        ExtHeader::Aeth,
        ExtHeader::AtomicAckEth,
        ExtHeader::ImmDt,
        ExtHeader::Ieth,
        ExtHeader::CnpReserved,
    ];

    /// Length in bytes on the wire.
    pub const fn size(self) -> usize {
        match self {
            ExtHeader::Deth => 8,
            ExtHeader::Feth => 4,
            ExtHeader::Reth => 16,
            ExtHeader::AtomicEth => 28,
            ExtHeader::Aeth => 4,
            ExtHeader::AtomicAckEth => 8,
            ExtHeader::ImmDt => 4,
            ExtHeader::Ieth => 4,
            ExtHeader::CnpReserved => 16,
        }
    }

    const fn bit(self) -> u16 {
        1 << (self as u8)
    }
}

/// A set of extension headers (at most one of each kind).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExtHeaders(u16);

impl ExtHeaders {
    /// No extension header: the payload (if any) follows the BTH.
    pub const NONE: ExtHeaders = ExtHeaders(0);

    /// This set plus `header`.
    #[must_use]
    pub const fn with(self, header: ExtHeader) -> ExtHeaders {
        ExtHeaders(self.0 | header.bit())
    }

    /// Whether `header` is in the set.
    pub const fn contains(self, header: ExtHeader) -> bool {
        self.0 & header.bit() != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The headers of the set, in wire order.
    pub fn iter(self) -> impl Iterator<Item = ExtHeader> {
        ExtHeader::ALL
            .into_iter()
            .filter(move |h| self.contains(*h))
    }

    /// Total length in bytes of the headers of the set (at most 92).
    pub const fn len(self) -> usize {
        let mut total: usize = 0;
        let mut rest: &[ExtHeader] = &ExtHeader::ALL;
        while let [h, tail @ ..] = rest {
            if self.contains(*h) {
                total = total.saturating_add(h.size());
            }
            rest = tail;
        }
        total
    }

    /// Offset of `header` from the start of the BTH, if it is in the set.
    pub const fn offset_of(self, header: ExtHeader) -> Option<usize> {
        if !self.contains(header) {
            return None;
        }
        let mut offset = super::bth::BTH_LEN;
        let mut rest: &[ExtHeader] = &ExtHeader::ALL;
        while let [h, tail @ ..] = rest {
            if *h as u8 == header as u8 {
                return Some(offset);
            }
            if self.contains(*h) {
                offset = offset.saturating_add(h.size());
            }
            rest = tail;
        }
        None
    }
}

/// Everything the engine needs to know about an implemented opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpcodeInfo {
    /// The opcode.
    pub opcode: Opcode,
    /// The transport service.
    pub transport: Transport,
    /// The operation.
    pub operation: Operation,
    /// The position in the message.
    pub position: Position,
    /// Extension headers between the BTH and the payload.
    pub headers: ExtHeaders,
    /// Whether a data payload may follow the headers.
    pub payload: bool,
    /// Carries ImmDt (SEND/RDMA WRITE ... WITH IMMEDIATE).
    pub immediate: bool,
    /// Carries IETH (SEND ... WITH INVALIDATE).
    pub invalidate: bool,
}

impl OpcodeInfo {
    /// Length of the BTH plus the extension headers.
    pub const fn header_len(&self) -> usize {
        // At most 12 + 88: saturation never happens.
        super::bth::BTH_LEN.saturating_add(self.headers.len())
    }

    /// A request (sent by a requester to a responder).
    pub const fn is_request(&self) -> bool {
        matches!(
            self.operation,
            Operation::Send
                | Operation::RdmaWrite
                | Operation::RdmaReadRequest
                | Operation::CompareSwap
                | Operation::FetchAdd
                | Operation::Flush
                | Operation::AtomicWrite
        )
    }

    /// A response (sent by an RC responder to the requester's completer).
    pub const fn is_response(&self) -> bool {
        matches!(
            self.operation,
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }

    /// A request the responder must answer (ACK, READ response or atomic
    /// ACK, possibly coalesced): every RC request.
    pub const fn expects_response(&self) -> bool {
        matches!(self.transport, Transport::Rc) && self.is_request()
    }

    /// A SEND (any variant).
    pub const fn is_send(&self) -> bool {
        matches!(self.operation, Operation::Send)
    }

    /// An RDMA WRITE (plain or with immediate).
    pub const fn is_rdma_write(&self) -> bool {
        matches!(self.operation, Operation::RdmaWrite)
    }

    /// RDMA READ request or response.
    pub const fn is_rdma_read(&self) -> bool {
        matches!(
            self.operation,
            Operation::RdmaReadRequest | Operation::RdmaReadResponse
        )
    }

    /// Atomic request (CmpSwap, FetchAdd).
    pub const fn is_atomic(&self) -> bool {
        matches!(self.operation, Operation::CompareSwap | Operation::FetchAdd)
    }

    /// FIRST or ONLY: starts a message.
    pub const fn is_first(&self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }

    /// LAST or ONLY: ends a message.
    pub const fn is_last(&self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }

    /// The responder takes a receive WQE for this packet: the first packet
    /// of a SEND, or the packet of an RDMA WRITE that carries immediate
    /// data (rxe's `RXE_RWR_MASK`).
    pub const fn consumes_recv_wqe(&self) -> bool {
        (self.is_send() && self.is_first()) || (self.is_rdma_write() && self.immediate)
    }

    /// The responder completes a receive WQE with this packet: the last
    /// packet of a SEND, or an RDMA WRITE with immediate (rxe's
    /// `RXE_COMP_MASK`).
    pub const fn completes_recv_wqe(&self) -> bool {
        (self.is_send() && self.is_last()) || (self.is_rdma_write() && self.immediate)
    }
}

const fn entry(
    opcode: u8,
    transport: Transport,
    operation: Operation,
    position: Position,
    headers: ExtHeaders,
) -> OpcodeInfo {
    OpcodeInfo {
        opcode: Opcode(opcode),
        transport,
        operation,
        position,
        headers,
        payload: matches!(
            operation,
            Operation::Send | Operation::RdmaWrite | Operation::RdmaReadResponse | Operation::AtomicWrite
        ),
        immediate: headers.contains(ExtHeader::ImmDt),
        invalidate: headers.contains(ExtHeader::Ieth),
    }
}

const NONE: ExtHeaders = ExtHeaders::NONE;
const DETH: ExtHeaders = NONE.with(ExtHeader::Deth);
const RETH: ExtHeaders = NONE.with(ExtHeader::Reth);
const AETH: ExtHeaders = NONE.with(ExtHeader::Aeth);
const IMM: ExtHeaders = NONE.with(ExtHeader::ImmDt);
const IETH: ExtHeaders = NONE.with(ExtHeader::Ieth);

/// The RC/UC operations that share their low five bits (IBTA opcode table).
const fn connected(code: u8, t: Transport, opcode: u8) -> Result<OpcodeInfo> {
    use Operation::*;
    use Position::*;
    let rc = matches!(t, Transport::Rc);
    let info = match code {
        0x00 => entry(opcode, t, Send, First, NONE),
        0x01 => entry(opcode, t, Send, Middle, NONE),
        0x02 => entry(opcode, t, Send, Last, NONE),
        0x03 => entry(opcode, t, Send, Last, IMM),
        0x04 => entry(opcode, t, Send, Only, NONE),
        0x05 => entry(opcode, t, Send, Only, IMM),
        0x06 => entry(opcode, t, RdmaWrite, First, RETH),
        0x07 => entry(opcode, t, RdmaWrite, Middle, NONE),
        0x08 => entry(opcode, t, RdmaWrite, Last, NONE),
        0x09 => entry(opcode, t, RdmaWrite, Last, IMM),
        0x0A => entry(opcode, t, RdmaWrite, Only, RETH),
        0x0B => entry(opcode, t, RdmaWrite, Only, RETH.with(ExtHeader::ImmDt)),
        0x0C if rc => entry(opcode, t, RdmaReadRequest, Only, RETH),
        0x0D if rc => entry(opcode, t, RdmaReadResponse, First, AETH),
        0x0E if rc => entry(opcode, t, RdmaReadResponse, Middle, NONE),
        0x0F if rc => entry(opcode, t, RdmaReadResponse, Last, AETH),
        0x10 if rc => entry(opcode, t, RdmaReadResponse, Only, AETH),
        0x11 if rc => entry(opcode, t, Acknowledge, Only, AETH),
        0x12 if rc => entry(
            opcode,
            t,
            AtomicAcknowledge,
            Only,
            AETH.with(ExtHeader::AtomicAckEth),
        ),
        0x13 if rc => entry(
            opcode,
            t,
            CompareSwap,
            Only,
            NONE.with(ExtHeader::AtomicEth),
        ),
        0x14 if rc => entry(opcode, t, FetchAdd, Only, NONE.with(ExtHeader::AtomicEth)),
        0x16 if rc => entry(opcode, t, Send, Last, IETH),
        0x17 if rc => entry(opcode, t, Send, Only, IETH),
        // FLUSH and ATOMIC WRITE (IBTA 1.5 memory placement extensions).
        0x1C if rc => entry(opcode, t, Flush, Only, NONE.with(ExtHeader::Feth).with(ExtHeader::Reth)),
        0x1D if rc => entry(opcode, t, AtomicWrite, Only, RETH),
        _ => return Err(Error::ReservedOpcode(opcode)),
    };
    Ok(info)
}

const fn lookup(opcode: u8) -> Result<OpcodeInfo> {
    let code = opcode & 0x1F;
    match opcode >> 5 {
        0b000 => connected(code, Transport::Rc, opcode),
        0b001 => connected(code, Transport::Uc, opcode),
        0b011 => match code {
            0x04 => Ok(entry(
                opcode,
                Transport::Ud,
                Operation::Send,
                Position::Only,
                DETH,
            )),
            0x05 => Ok(entry(
                opcode,
                Transport::Ud,
                Operation::Send,
                Position::Only,
                DETH.with(ExtHeader::ImmDt),
            )),
            _ => Err(Error::ReservedOpcode(opcode)),
        },
        0b100 => match code {
            0x01 => Ok(entry(
                opcode,
                Transport::Cnp,
                Operation::Cnp,
                Position::Only,
                NONE.with(ExtHeader::CnpReserved),
            )),
            _ => Err(Error::ReservedOpcode(opcode)),
        },
        // RD (010), XRC (101) and manufacturer specific (11x).
        _ => Err(Error::UnsupportedOpcode(opcode)),
    }
}

#[cfg(test)]
mod tests {
    use super::ExtHeader::*;
    use super::Operation::*;
    use super::Position::*;
    use super::Transport::*;
    use super::*;

    /// One row of the IBTA opcode tables, written out independently of
    /// `lookup`: opcode, transport, operation, position, extension headers
    /// in wire order, payload, consumes a receive WQE, completes one.
    type Row = (
        u8,
        Transport,
        Operation,
        Position,
        &'static [ExtHeader],
        bool,
        bool,
        bool,
    );

    #[rustfmt::skip]
    const IBTA: &[Row] = &[
        (0x00, Rc, Send, First, &[], true, true, false),
        (0x01, Rc, Send, Middle, &[], true, false, false),
        (0x02, Rc, Send, Last, &[], true, false, true),
        (0x03, Rc, Send, Last, &[ImmDt], true, false, true),
        (0x04, Rc, Send, Only, &[], true, true, true),
        (0x05, Rc, Send, Only, &[ImmDt], true, true, true),
        (0x06, Rc, RdmaWrite, First, &[Reth], true, false, false),
        (0x07, Rc, RdmaWrite, Middle, &[], true, false, false),
        (0x08, Rc, RdmaWrite, Last, &[], true, false, false),
        (0x09, Rc, RdmaWrite, Last, &[ImmDt], true, true, true),
        (0x0A, Rc, RdmaWrite, Only, &[Reth], true, false, false),
        (0x0B, Rc, RdmaWrite, Only, &[Reth, ImmDt], true, true, true),
        (0x0C, Rc, RdmaReadRequest, Only, &[Reth], false, false, false),
        (0x0D, Rc, RdmaReadResponse, First, &[Aeth], true, false, false),
        (0x0E, Rc, RdmaReadResponse, Middle, &[], true, false, false),
        (0x0F, Rc, RdmaReadResponse, Last, &[Aeth], true, false, false),
        (0x10, Rc, RdmaReadResponse, Only, &[Aeth], true, false, false),
        (0x11, Rc, Acknowledge, Only, &[Aeth], false, false, false),
        (0x12, Rc, AtomicAcknowledge, Only, &[Aeth, AtomicAckEth], false, false, false),
        (0x13, Rc, CompareSwap, Only, &[AtomicEth], false, false, false),
        (0x14, Rc, FetchAdd, Only, &[AtomicEth], false, false, false),
        (0x16, Rc, Send, Last, &[Ieth], true, false, true),
        (0x17, Rc, Send, Only, &[Ieth], true, true, true),
        (0x1C, Rc, Flush, Only, &[Feth, Reth], false, false, false),
        (0x1D, Rc, AtomicWrite, Only, &[Reth], true, false, false),
        (0x20, Uc, Send, First, &[], true, true, false),
        (0x21, Uc, Send, Middle, &[], true, false, false),
        (0x22, Uc, Send, Last, &[], true, false, true),
        (0x23, Uc, Send, Last, &[ImmDt], true, false, true),
        (0x24, Uc, Send, Only, &[], true, true, true),
        (0x25, Uc, Send, Only, &[ImmDt], true, true, true),
        (0x26, Uc, RdmaWrite, First, &[Reth], true, false, false),
        (0x27, Uc, RdmaWrite, Middle, &[], true, false, false),
        (0x28, Uc, RdmaWrite, Last, &[], true, false, false),
        (0x29, Uc, RdmaWrite, Last, &[ImmDt], true, true, true),
        (0x2A, Uc, RdmaWrite, Only, &[Reth], true, false, false),
        (0x2B, Uc, RdmaWrite, Only, &[Reth, ImmDt], true, true, true),
        (0x64, Ud, Send, Only, &[Deth], true, true, true),
        (0x65, Ud, Send, Only, &[Deth, ImmDt], true, true, true),
        (0x81, Transport::Cnp, Operation::Cnp, Only, &[CnpReserved], false, false, false),
    ];

    fn size(h: ExtHeader) -> usize {
        // Lengths from the IBTA header figures, independent of `size()`.
        match h {
            Deth => 8,
            Feth => 4,
            Reth => 16,
            AtomicEth => 28,
            Aeth => 4,
            AtomicAckEth => 8,
            ImmDt => 4,
            Ieth => 4,
            CnpReserved => 16,
        }
    }

    #[test]
    fn opcode_table_matches_ibta() {
        for &(op, transport, operation, position, headers, payload, rwr, comp) in IBTA {
            let info = Opcode(op).info().unwrap_or_else(|e| panic!("{op:#x}: {e}"));
            assert_eq!(info.opcode, Opcode(op));
            assert_eq!(info.transport, transport, "{op:#x}");
            assert_eq!(info.operation, operation, "{op:#x}");
            assert_eq!(info.position, position, "{op:#x}");
            assert_eq!(info.payload, payload, "{op:#x}");
            assert_eq!(info.consumes_recv_wqe(), rwr, "{op:#x} rwr");
            assert_eq!(info.completes_recv_wqe(), comp, "{op:#x} comp");
            assert_eq!(info.immediate, headers.contains(&ImmDt), "{op:#x}");
            assert_eq!(info.invalidate, headers.contains(&Ieth), "{op:#x}");
            // Headers, their order and their offsets.
            assert!(info.headers.iter().eq(headers.iter().copied()), "{op:#x}");
            let mut offset = 12;
            for &h in headers {
                assert_eq!(info.headers.offset_of(h), Some(offset), "{op:#x} {h:?}");
                offset += size(h);
            }
            assert_eq!(info.header_len(), offset, "{op:#x}");
            for h in ExtHeader::ALL {
                if !headers.contains(&h) {
                    assert_eq!(info.headers.offset_of(h), None);
                }
            }
            // Request/response classification.
            let request = matches!(
                operation,
                Send | RdmaWrite | RdmaReadRequest | CompareSwap | FetchAdd | Flush | AtomicWrite
            );
            let response = matches!(
                operation,
                RdmaReadResponse | Acknowledge | AtomicAcknowledge
            );
            assert_eq!(info.is_request(), request, "{op:#x}");
            assert_eq!(info.is_response(), response, "{op:#x}");
            assert_eq!(
                info.expects_response(),
                request && transport == Rc,
                "{op:#x}"
            );
            assert_eq!(info.is_first(), matches!(position, First | Only));
            assert_eq!(info.is_last(), matches!(position, Last | Only));
            assert_eq!(info.is_send(), operation == Send);
            assert_eq!(info.is_rdma_write(), operation == RdmaWrite);
            assert_eq!(
                info.is_rdma_read(),
                matches!(operation, RdmaReadRequest | RdmaReadResponse)
            );
            assert_eq!(
                info.is_atomic(),
                matches!(operation, CompareSwap | FetchAdd)
            );
        }
    }

    #[test]
    fn opcode_named_constants() {
        let named = [
            (Opcode::RC_SEND_FIRST, 0x00),
            (Opcode::RC_SEND_ONLY_WITH_IMMEDIATE, 0x05),
            (Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0x0B),
            (Opcode::RC_RDMA_READ_REQUEST, 0x0C),
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0x10),
            (Opcode::RC_ACKNOWLEDGE, 0x11),
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, 0x12),
            (Opcode::RC_COMPARE_SWAP, 0x13),
            (Opcode::RC_FETCH_ADD, 0x14),
            (Opcode::RC_SEND_LAST_WITH_INVALIDATE, 0x16),
            (Opcode::RC_SEND_ONLY_WITH_INVALIDATE, 0x17),
            (Opcode::UC_SEND_FIRST, 0x20),
            (Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0x2B),
            (Opcode::UD_SEND_ONLY, 0x64),
            (Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, 0x65),
            (Opcode::CNP, 0x81),
        ];
        for (opcode, value) in named {
            assert_eq!(opcode.0, value);
        }
    }

    #[test]
    fn opcode_reserved_and_unsupported_are_distinct_errors() {
        for op in 0..=u8::MAX {
            let listed = IBTA.iter().any(|row| row.0 == op);
            let result = Opcode(op).info();
            if listed {
                assert!(result.is_ok(), "{op:#x}");
                continue;
            }
            let unsupported = matches!(op, 0x40..=0x5F | 0xA0..=0xFF);
            let expected = if unsupported {
                Error::UnsupportedOpcode(op)
            } else {
                Error::ReservedOpcode(op)
            };
            assert_eq!(result, Err(expected), "{op:#x}");
        }
    }

    #[test]
    fn ext_header_sets() {
        let set = ExtHeaders::NONE.with(ImmDt).with(Reth);
        assert!(set.contains(Reth) && set.contains(ImmDt) && !set.contains(Deth));
        assert!(!set.is_empty() && ExtHeaders::NONE.is_empty());
        assert_eq!(set.len(), 20);
        assert_eq!(ExtHeaders::NONE.len(), 0);
        assert!(set.iter().eq([Reth, ImmDt]));
        let all = ExtHeader::ALL
            .iter()
            .fold(ExtHeaders::NONE, |s, h| s.with(*h));
        assert_eq!(all.len(), 92);
        for h in ExtHeader::ALL {
            assert_eq!(h.size(), size(h));
        }
    }
}

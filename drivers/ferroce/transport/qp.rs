//! QP states, attributes and the Modify QP transition rules.
//!
//! The table is the one the Linux RDMA core applies in `ib_modify_qp_is_ok`
//! (drivers/infiniband/core/verbs.c), restricted to UD and RC: for each
//! (current state, next state) pair, whether the transition exists and which
//! attributes it requires and allows. Attribute mask bits equal
//! `enum ibv_qp_attr_mask`, so the kernel glue passes masks through.

use super::error::Error;

/// `enum ibv_qp_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum QpState {
    /// Created, not configured; nothing is processed.
    #[default]
    Reset = 0,
    /// Receives may be posted; nothing is processed.
    Init = 1,
    /// Ready to receive: the receive side runs.
    Rtr = 2,
    /// Ready to send: fully operational.
    Rts = 3,
    /// Send queue drain: in-progress messages finish, no new ones start.
    Sqd = 4,
    /// Send queue error (UD): the send side stopped after an error, the
    /// receive side runs.
    Sqe = 5,
    /// Error: nothing is processed, work requests are flushed.
    Err = 6,
}

impl QpState {
    /// The `ibv_qp_state` value `v`.
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            4 => Self::Sqd,
            5 => Self::Sqe,
            6 => Self::Err,
            _ => return None,
        })
    }

    /// Whether received request packets are processed in this state.
    pub fn receives(self) -> bool {
        matches!(self, Self::Rtr | Self::Rts | Self::Sqd | Self::Sqe)
    }

    /// Whether the send queue may start new messages.
    pub fn sends(self) -> bool {
        matches!(self, Self::Rts)
    }

    /// Whether work requests may be posted to the send queue.
    pub fn accepts_send_wr(self) -> bool {
        matches!(self, Self::Rts | Self::Sqd | Self::Sqe | Self::Err)
    }

    /// Whether work requests may be posted to the receive queue.
    pub fn accepts_recv_wr(self) -> bool {
        !matches!(self, Self::Reset)
    }
}

/// The transport service types the engine implements (`enum ibv_qp_type`
/// values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum QpType {
    /// Reliable Connected.
    Rc = 2,
    /// Unreliable Connected: RC's messages without ACKs, retries, READs or
    /// atomics; a lost packet loses its message.
    Uc = 3,
    /// Unreliable Datagram.
    Ud = 4,
}

/// `enum ibv_qp_attr_mask` bits.
pub mod mask {
    /// `qp_state` is set: a state transition.
    pub const STATE: u32 = 1 << 0;
    /// `cur_qp_state` is set.
    pub const CUR_STATE: u32 = 1 << 1;
    /// `en_sqd_async_notify` is set.
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    /// `qp_access_flags` is set.
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// `pkey_index` is set.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// `port_num` is set.
    pub const PORT: u32 = 1 << 5;
    /// `qkey` is set.
    pub const QKEY: u32 = 1 << 6;
    /// `ah_attr` (primary path) is set.
    pub const AV: u32 = 1 << 7;
    /// `path_mtu` is set.
    pub const PATH_MTU: u32 = 1 << 8;
    /// `timeout` (local ACK timeout) is set.
    pub const TIMEOUT: u32 = 1 << 9;
    /// `retry_cnt` is set.
    pub const RETRY_CNT: u32 = 1 << 10;
    /// `rnr_retry` is set.
    pub const RNR_RETRY: u32 = 1 << 11;
    /// `rq_psn` is set.
    pub const RQ_PSN: u32 = 1 << 12;
    /// `max_rd_atomic` is set.
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// `alt_ah_attr` and friends are set.
    pub const ALT_PATH: u32 = 1 << 14;
    /// `min_rnr_timer` is set.
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// `sq_psn` is set.
    pub const SQ_PSN: u32 = 1 << 16;
    /// `max_dest_rd_atomic` is set.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// `path_mig_state` is set.
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    /// `cap` is set.
    pub const CAP: u32 = 1 << 19;
    /// `dest_qp_num` is set.
    pub const DEST_QPN: u32 = 1 << 20;
}

/// What a transition requires and allows, per QP type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Attributes that must be in the mask.
    pub required: u32,
    /// Attributes that may be in the mask.
    pub optional: u32,
}

const fn t(required: u32, optional: u32) -> Option<Transition> {
    Some(Transition { required, optional })
}

/// The rule for `cur -> next` on a QP of type `ty`, `None` when the
/// transition does not exist.
pub fn transition(ty: QpType, cur: QpState, next: QpState) -> Option<Transition> {
    use mask::*;
    use QpState::*;
    let ud = ty == QpType::Ud;
    let uc = ty == QpType::Uc;
    // Every state may go to RESET and to ERR with nothing else in the mask.
    if matches!(next, Reset | Err) {
        return t(0, 0);
    }
    match (cur, next) {
        (Reset, Init) => {
            if ud {
                t(PKEY_INDEX | PORT | QKEY, 0)
            } else {
                t(PKEY_INDEX | PORT | ACCESS_FLAGS, 0)
            }
        }
        (Init, Init) => {
            if ud {
                t(0, PKEY_INDEX | PORT | QKEY)
            } else {
                t(0, PKEY_INDEX | PORT | ACCESS_FLAGS)
            }
        }
        (Init, Rtr) => {
            if ud {
                t(0, PKEY_INDEX | QKEY)
            } else if uc {
                t(AV | PATH_MTU | DEST_QPN | RQ_PSN, ALT_PATH | ACCESS_FLAGS | PKEY_INDEX)
            } else {
                t(
                    AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
                    ALT_PATH | ACCESS_FLAGS | PKEY_INDEX,
                )
            }
        }
        (Rtr, Rts) => {
            if ud {
                t(SQ_PSN, CUR_STATE | QKEY)
            } else if uc {
                t(SQ_PSN, CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE)
            } else {
                t(
                    TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC,
                    CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE,
                )
            }
        }
        (Rts, Rts) | (Sqd, Rts) => {
            if ud {
                t(0, CUR_STATE | QKEY)
            } else if uc {
                t(0, CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE)
            } else {
                t(0, CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER)
            }
        }
        (Rts, Sqd) => t(0, EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => {
            if ud {
                t(0, PKEY_INDEX | QKEY)
            } else if uc {
                t(0, AV | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX | PATH_MIG_STATE)
            } else {
                t(
                    0,
                    PORT | AV
                        | TIMEOUT
                        | RETRY_CNT
                        | RNR_RETRY
                        | MAX_QP_RD_ATOMIC
                        | MAX_DEST_RD_ATOMIC
                        | ALT_PATH
                        | ACCESS_FLAGS
                        | PKEY_INDEX
                        | MIN_RNR_TIMER
                        | PATH_MIG_STATE,
                )
            }
        }
        (Sqe, Rts) => {
            if ud {
                t(0, CUR_STATE | QKEY)
            } else if uc {
                t(0, CUR_STATE | ACCESS_FLAGS)
            } else {
                // The RDMA core lists SQE -> RTS for every type; an RC QP
                // never enters SQE (IBTA: RC errors go straight to ERR).
                t(0, 0)
            }
        }
        _ => None,
    }
}

/// The check of `ib_modify_qp_is_ok`: whether `mask` is a legal Modify QP
/// from `cur` on a QP of type `ty`, with `next` the requested state (equal to
/// `cur` when `mask` lacks [`mask::STATE`]).
pub fn modify_is_ok(ty: QpType, cur: QpState, next: QpState, mask: u32) -> Result<(), Error> {
    if mask & mask::CUR_STATE != 0
        && !matches!(cur, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe)
    {
        return Err(Error::Invalid);
    }
    let rule = transition(ty, cur, next).ok_or(Error::Invalid)?;
    if mask & rule.required != rule.required {
        return Err(Error::Invalid);
    }
    if mask & !(rule.required | rule.optional | mask::STATE) != 0 {
        return Err(Error::Invalid);
    }
    Ok(())
}

/// `enum ibv_mtu`: the path MTU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    #[default]
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// The `ibv_mtu` value `v`.
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::Mtu256,
            2 => Self::Mtu512,
            3 => Self::Mtu1024,
            4 => Self::Mtu2048,
            5 => Self::Mtu4096,
            _ => return None,
        })
    }

    /// Bytes.
    pub fn bytes(self) -> u32 {
        match self {
            Self::Mtu256 => 256,
            Self::Mtu512 => 512,
            Self::Mtu1024 => 1024,
            Self::Mtu2048 => 2048,
            Self::Mtu4096 => 4096,
        }
    }
}

/// Largest `max_rd_atomic` / `max_dest_rd_atomic` the engine supports; the
/// responder keeps this many read/atomic resources per QP.
pub const MAX_RD_ATOMIC: u8 = 16;

/// The attributes of `struct ibv_qp_attr` the engine uses. Fields are read
/// only when their [`mask`] bit is set in a Modify QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QpAttr {
    /// Requested state ([`mask::STATE`]).
    pub qp_state: QpState,
    /// Asserted current state ([`mask::CUR_STATE`]).
    pub cur_qp_state: QpState,
    /// Path MTU ([`mask::PATH_MTU`]).
    pub path_mtu: Mtu,
    /// Q_Key ([`mask::QKEY`]).
    pub qkey: u32,
    /// Responder start ePSN ([`mask::RQ_PSN`]).
    pub rq_psn: u32,
    /// Requester start PSN ([`mask::SQ_PSN`]).
    pub sq_psn: u32,
    /// Remote QPN ([`mask::DEST_QPN`]).
    pub dest_qp_num: u32,
    /// Incoming access rights, [`super::verbs::access`] bits
    /// ([`mask::ACCESS_FLAGS`]).
    pub qp_access_flags: u32,
    /// P_Key table index ([`mask::PKEY_INDEX`]).
    pub pkey_index: u16,
    /// Port ([`mask::PORT`]).
    pub port_num: u8,
    /// Address handle of the primary path, opaque to the engine
    /// ([`mask::AV`]).
    pub ah: u32,
    /// Local ACK timeout exponent, 0 = infinite ([`mask::TIMEOUT`]).
    pub timeout: u8,
    /// Transport retries, 0..=7 ([`mask::RETRY_CNT`]).
    pub retry_cnt: u8,
    /// RNR retries, 0..=7 with 7 = infinite ([`mask::RNR_RETRY`]).
    pub rnr_retry: u8,
    /// RNR NAK timer code this responder sends ([`mask::MIN_RNR_TIMER`]).
    pub min_rnr_timer: u8,
    /// Outstanding RDMA READ/atomic requests as requester
    /// ([`mask::MAX_QP_RD_ATOMIC`]).
    pub max_rd_atomic: u8,
    /// Read/atomic resources as responder ([`mask::MAX_DEST_RD_ATOMIC`]).
    pub max_dest_rd_atomic: u8,
    /// Accepted and ignored ([`mask::EN_SQD_ASYNC_NOTIFY`]).
    pub en_sqd_async_notify: u8,
}

impl QpAttr {
    /// Checks the value ranges of the attributes selected by `mask`.
    pub fn validate(&self, mask: u32) -> Result<(), Error> {
        let bad = |bit: u32, ok: bool| mask & bit != 0 && !ok;
        if bad(mask::RQ_PSN, self.rq_psn <= 0xff_ffff)
            || bad(mask::SQ_PSN, self.sq_psn <= 0xff_ffff)
            || bad(mask::DEST_QPN, self.dest_qp_num <= 0xff_ffff)
            || bad(mask::TIMEOUT, self.timeout <= 31)
            || bad(mask::RETRY_CNT, self.retry_cnt <= 7)
            || bad(mask::RNR_RETRY, self.rnr_retry <= 7)
            || bad(mask::MIN_RNR_TIMER, self.min_rnr_timer <= 31)
            || bad(mask::MAX_QP_RD_ATOMIC, self.max_rd_atomic <= MAX_RD_ATOMIC)
            || bad(mask::MAX_DEST_RD_ATOMIC, self.max_dest_rd_atomic <= MAX_RD_ATOMIC)
            || bad(
                mask::ACCESS_FLAGS,
                self.qp_access_flags
                    & !(0xf
                        | super::verbs::access::ON_DEMAND
                        | super::verbs::access::FLUSH_GLOBAL
                        | super::verbs::access::FLUSH_PERSISTENT)
                    == 0,
            )
        {
            return Err(Error::Invalid);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::mask::*;
    use super::QpState::*;
    use super::*;

    const EINVAL: Result<(), Error> = Result::Err(Error::Invalid);
    const ALL: [QpState; 7] = [Reset, Init, Rtr, Rts, Sqd, Sqe, Err];
    const UD_INIT: u32 = PKEY_INDEX | PORT | QKEY;
    const RC_INIT: u32 = PKEY_INDEX | PORT | ACCESS_FLAGS;
    const RC_RTR: u32 = AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
    const RC_RTS: u32 = TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC;
    const UC_RTR: u32 = AV | PATH_MTU | DEST_QPN | RQ_PSN;
    const TYPES: [QpType; 3] = [QpType::Ud, QpType::Uc, QpType::Rc];

    /// Every legal transition with exactly its required attributes.
    fn legal(ty: QpType) -> [(QpState, QpState, u32); 11] {
        let (ud, uc) = (ty == QpType::Ud, ty == QpType::Uc);
        [
            (Reset, Init, if ud { UD_INIT } else { RC_INIT }),
            (Init, Init, 0),
            (Init, Rtr, if ud { 0 } else if uc { UC_RTR } else { RC_RTR }),
            (Rtr, Rts, if ud || uc { SQ_PSN } else { RC_RTS }),
            (Rts, Rts, 0),
            (Rts, Sqd, 0),
            (Sqd, Rts, 0),
            (Sqd, Sqd, 0),
            (Sqe, Rts, 0),
            (Init, Reset, 0),
            (Rts, Err, 0),
        ]
    }

    #[test]
    fn state_every_legal_transition_with_required_attributes() {
        for ty in TYPES {
            for (cur, next, req) in legal(ty) {
                assert_eq!(modify_is_ok(ty, cur, next, STATE | req), Ok(()), "{ty:?} {cur:?}->{next:?}");
            }
            for cur in ALL {
                assert_eq!(modify_is_ok(ty, cur, Reset, STATE), Ok(()));
                assert_eq!(modify_is_ok(ty, cur, Err, STATE), Ok(()));
            }
        }
    }

    #[test]
    fn state_illegal_transitions_are_einval() {
        let illegal = [
            (Reset, Rtr),
            (Reset, Rts),
            (Reset, Sqd),
            (Reset, Sqe),
            (Init, Rts),
            (Init, Sqd),
            (Rtr, Rtr),
            (Rtr, Init),
            (Rtr, Sqd),
            (Rts, Init),
            (Rts, Rtr),
            (Rts, Sqe),
            (Sqd, Init),
            (Sqe, Sqd),
            (Err, Init),
            (Err, Rts),
        ];
        for ty in TYPES {
            for (cur, next) in illegal {
                let everything = 0x1f_ffff;
                assert_eq!(modify_is_ok(ty, cur, next, everything), EINVAL);
                assert_eq!(modify_is_ok(ty, cur, next, STATE), EINVAL);
            }
        }
    }

    #[test]
    fn state_missing_required_attribute_is_einval() {
        for ty in TYPES {
            for (cur, next, req) in legal(ty) {
                let mut bits = req;
                while bits != 0 {
                    let bit = bits & bits.wrapping_neg();
                    bits &= !bit;
                    assert_eq!(
                        modify_is_ok(ty, cur, next, STATE | (req & !bit)),
                        EINVAL,
                        "{ty:?} {cur:?}->{next:?} without {bit:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn state_extra_attribute_is_einval_optional_is_accepted() {
        // UD has no path, RC has no Q_Key.
        assert_eq!(modify_is_ok(QpType::Ud, Init, Rtr, STATE | AV), EINVAL);
        assert_eq!(modify_is_ok(QpType::Rc, Reset, Init, STATE | RC_INIT | QKEY), EINVAL);
        assert_eq!(modify_is_ok(QpType::Rc, Rtr, Rts, STATE | RC_RTS | RQ_PSN), EINVAL);
        assert_eq!(modify_is_ok(QpType::Ud, Rtr, Rts, STATE | SQ_PSN | TIMEOUT), EINVAL);
        // RESET->INIT has no optional attributes; ->ERR takes nothing.
        assert_eq!(modify_is_ok(QpType::Ud, Reset, Init, STATE | UD_INIT | CUR_STATE), EINVAL);
        assert_eq!(modify_is_ok(QpType::Rc, Rts, Err, STATE | QKEY), EINVAL);
        // Optional ones are fine.
        assert_eq!(modify_is_ok(QpType::Ud, Init, Rtr, STATE | QKEY | PKEY_INDEX), Ok(()));
        assert_eq!(modify_is_ok(QpType::Rc, Init, Rtr, STATE | RC_RTR | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX), Ok(()));
        assert_eq!(modify_is_ok(QpType::Rc, Rtr, Rts, STATE | RC_RTS | CUR_STATE | MIN_RNR_TIMER), Ok(()));
        assert_eq!(modify_is_ok(QpType::Ud, Rts, Rts, QKEY | CUR_STATE), Ok(()));
        assert_eq!(modify_is_ok(QpType::Rc, Sqd, Sqd, STATE | TIMEOUT | MAX_DEST_RD_ATOMIC), Ok(()));
        assert_eq!(modify_is_ok(QpType::Rc, Rts, Sqd, STATE | EN_SQD_ASYNC_NOTIFY), Ok(()));
        // UC has no ACK timer, retries, RNR or READ/atomic resources.
        assert_eq!(modify_is_ok(QpType::Uc, Init, Rtr, STATE | UC_RTR | MAX_DEST_RD_ATOMIC), EINVAL);
        assert_eq!(modify_is_ok(QpType::Uc, Init, Rtr, STATE | UC_RTR | MIN_RNR_TIMER), EINVAL);
        assert_eq!(modify_is_ok(QpType::Uc, Rtr, Rts, STATE | SQ_PSN | TIMEOUT), EINVAL);
        assert_eq!(modify_is_ok(QpType::Uc, Rtr, Rts, STATE | SQ_PSN | RETRY_CNT), EINVAL);
        assert_eq!(modify_is_ok(QpType::Uc, Reset, Init, STATE | RC_INIT | QKEY), EINVAL);
        assert_eq!(modify_is_ok(QpType::Uc, Init, Rtr, STATE | UC_RTR | ACCESS_FLAGS), Ok(()));
        assert_eq!(modify_is_ok(QpType::Uc, Sqe, Rts, STATE | ACCESS_FLAGS), Ok(()));
        // CUR_STATE only from RTR, RTS, SQD, SQE.
        assert_eq!(modify_is_ok(QpType::Ud, Init, Init, CUR_STATE), EINVAL);
    }

    #[test]
    fn state_attribute_ranges() {
        let a = QpAttr { retry_cnt: 8, ..QpAttr::default() };
        assert_eq!(a.validate(RETRY_CNT), EINVAL);
        assert_eq!(a.validate(TIMEOUT), Ok(()));
        let a = QpAttr { sq_psn: 1 << 24, ..QpAttr::default() };
        assert_eq!(a.validate(SQ_PSN), EINVAL);
        let a = QpAttr { max_dest_rd_atomic: MAX_RD_ATOMIC + 1, ..QpAttr::default() };
        assert_eq!(a.validate(MAX_DEST_RD_ATOMIC), EINVAL);
        assert_eq!(Error::Invalid.errno(), -22);
    }
}

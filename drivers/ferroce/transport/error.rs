//! Errors a verb call on the engine returns to its caller.

/// Why a verb (Modify QP, Post Send, Post Receive) was refused. Each maps to
/// the errno the verbs ABI gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Illegal transition, missing or extra attribute, attribute out of
    /// range, work request not valid for this QP type or state: `EINVAL`.
    Invalid,
    /// The work queue is full: `ENOMEM`, as libibverbs providers return.
    QueueFull,
}

impl Error {
    /// The negative errno the kernel returns for this error.
    pub fn errno(self) -> i32 {
        match self {
            Error::Invalid => -22,
            Error::QueueFull => -12,
        }
    }
}

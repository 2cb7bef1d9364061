//! A fixed-capacity FIFO over storage the caller owns.
//!
//! The kernel hands in a `KVec`/`KBox<[T]>` sized from `ibv_qp_cap`, the
//! host tests an array or a `Vec`; the ring never allocates.

use core::marker::PhantomData;

/// Backing storage of a [`Ring`]: any owned slice of slots.
pub trait Storage<T> {
    /// The slots.
    fn slots(&self) -> &[T];
    /// The slots, mutably.
    fn slots_mut(&mut self) -> &mut [T];
}

impl<T, B: AsRef<[T]> + AsMut<[T]>> Storage<T> for B {
    fn slots(&self) -> &[T] {
        self.as_ref()
    }
    fn slots_mut(&mut self) -> &mut [T] {
        self.as_mut()
    }
}

/// FIFO of `T` in caller storage; index 0 is the oldest entry.
pub struct Ring<T, B> {
    buf: B,
    head: usize,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Copy, B: Storage<T>> Ring<T, B> {
    /// An empty ring over `buf` (its current contents are ignored).
    pub fn new(buf: B) -> Self {
        Self { buf, head: 0, len: 0, _t: PhantomData }
    }

    /// Slots in the storage.
    pub fn capacity(&self) -> usize {
        self.buf.slots().len()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a push would fail.
    pub fn is_full(&self) -> bool {
        self.len >= self.capacity()
    }

    fn slot(&self, i: usize) -> Option<usize> {
        if i >= self.len {
            return None;
        }
        self.head.checked_add(i)?.checked_rem(self.capacity())
    }

    /// The `i`-th oldest entry.
    pub fn get(&self, i: usize) -> Option<&T> {
        let s = self.slot(i)?;
        self.buf.slots().get(s)
    }

    /// The `i`-th oldest entry, mutably.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        let s = self.slot(i)?;
        self.buf.slots_mut().get_mut(s)
    }

    /// Appends `v`; gives it back when full.
    pub fn push(&mut self, v: T) -> Result<(), T> {
        if self.is_full() {
            return Err(v);
        }
        let Some(s) = self
            .head
            .checked_add(self.len)
            .and_then(|x| x.checked_rem(self.capacity()))
        else {
            return Err(v);
        };
        match self.buf.slots_mut().get_mut(s) {
            Some(slot) => *slot = v,
            None => return Err(v),
        }
        self.len = self.len.saturating_add(1);
        Ok(())
    }

    /// Removes and returns the oldest entry.
    pub fn pop(&mut self) -> Option<T> {
        let v = *self.get(0)?;
        self.head = self
            .head
            .checked_add(1)
            .and_then(|x| x.checked_rem(self.capacity()))
            .unwrap_or(0);
        self.len = self.len.saturating_sub(1);
        Some(v)
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_wraps_and_refuses_when_full() {
        let mut r: Ring<u32, [u32; 3]> = Ring::new([0; 3]);
        assert_eq!(r.pop(), None);
        for round in 0..5u32 {
            for i in 0..3 {
                assert!(r.push(round * 10 + i).is_ok());
            }
            assert_eq!(r.push(99), Err(99));
            assert_eq!(r.get(2), Some(&(round * 10 + 2)));
            assert_eq!(r.get(3), None);
            for i in 0..3 {
                assert_eq!(r.pop(), Some(round * 10 + i));
            }
            assert!(r.is_empty());
        }
    }

    #[test]
    fn zero_capacity_is_always_full() {
        let mut r: Ring<u8, [u8; 0]> = Ring::new([]);
        assert!(r.is_full());
        assert_eq!(r.push(1), Err(1));
        assert_eq!(r.pop(), None);
    }
}

//! Checked reads over one message's bytes: every read is bounded, none panics.

use super::decode::DecodeError;
use super::message::{MessageType, TupleValue};

/// Microseconds from 1970-01-01 (Unix epoch) to 2000-01-01 (PostgreSQL's epoch).
pub(super) const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// Wire size of the smallest tuple column: its kind byte (`n` or `u`).
const MIN_TUPLE_COLUMN_BYTES: usize = 1;

/// Checked reads over one message; `pos` never exceeds `buf.len()`.
pub(super) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
    pub(super) message: MessageType,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    fn remaining(&self) -> usize {
        self.rest().len()
    }

    /// Moves past `n` bytes already known to be there.
    fn advance(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n).min(self.buf.len());
    }

    fn truncated(&self, field: &'static str, needed: usize) -> DecodeError {
        DecodeError::Truncated {
            message: self.message,
            field,
            offset: self.pos,
            needed,
            remaining: self.remaining(),
        }
    }

    pub(super) fn invalid(
        &self,
        field: &'static str,
        offset: usize,
        found: u8,
        expected: &'static str,
    ) -> DecodeError {
        DecodeError::InvalidByte {
            message: self.message,
            field,
            offset,
            found,
            expected,
        }
    }

    fn get_bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let bytes = self
            .rest()
            .get(..n)
            .ok_or_else(|| self.truncated(field, n))?;
        self.advance(n);
        Ok(bytes)
    }

    fn get_array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let array = *self
            .rest()
            .first_chunk::<N>()
            .ok_or_else(|| self.truncated(field, N))?;
        self.advance(N);
        Ok(array)
    }

    pub(super) fn get_u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        self.get_array(field).map(u8::from_be_bytes)
    }

    pub(super) fn get_i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        self.get_array(field).map(i16::from_be_bytes)
    }

    pub(super) fn get_i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        self.get_array(field).map(i32::from_be_bytes)
    }

    pub(super) fn get_u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.get_array(field).map(u32::from_be_bytes)
    }

    pub(super) fn get_u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.get_array(field).map(u64::from_be_bytes)
    }

    fn get_i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        self.get_array(field).map(i64::from_be_bytes)
    }

    /// A PostgreSQL timestamp, moved from the 2000 epoch to the Unix epoch.
    pub(super) fn get_timestamp(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        let offset = self.pos;
        let pg = self.get_i64(field)?;
        pg.checked_add(PG_EPOCH_OFFSET_US)
            .ok_or(DecodeError::TimestampOutOfRange {
                message: self.message,
                field,
                offset,
            })
    }

    /// A flags byte in which only the bits of `allowed` may be set.
    pub(super) fn get_flags(
        &mut self,
        field: &'static str,
        allowed: u8,
        expected: &'static str,
    ) -> Result<u8, DecodeError> {
        let offset = self.pos;
        let flags = self.get_u8(field)?;
        if flags & !allowed != 0 {
            return Err(self.invalid(field, offset, flags, expected));
        }
        Ok(flags)
    }

    pub(super) fn expect_byte(
        &mut self,
        field: &'static str,
        want: u8,
        expected: &'static str,
    ) -> Result<(), DecodeError> {
        let offset = self.pos;
        match self.get_u8(field)? {
            b if b == want => Ok(()),
            found => Err(self.invalid(field, offset, found, expected)),
        }
    }

    /// A NUL-terminated UTF-8 string.
    pub(super) fn get_cstr(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let offset = self.pos;
        let unterminated = DecodeError::Unterminated {
            message: self.message,
            field,
            offset,
        };
        let rest = self.rest();
        let nul = rest.iter().position(|&b| b == 0);
        let (text, _) = nul
            .and_then(|nul| rest.split_at_checked(nul))
            .ok_or(unterminated)?;
        let text = std::str::from_utf8(text).map_err(|_| DecodeError::InvalidUtf8 {
            message: self.message,
            field,
            offset,
        })?;
        self.advance(text.len().saturating_add(1));
        Ok(text.to_owned())
    }

    /// Bytes preceded by their Int32 length.
    pub(super) fn get_counted(
        &mut self,
        length_field: &'static str,
        field: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        let offset = self.pos;
        let len = self.get_i32(length_field)?;
        let len = self.check_count(length_field, offset, i64::from(len), 1)?;
        self.get_bytes(len, field)
    }

    /// A declared count (or length) of entries of at least `min_size` bytes each, checked
    /// against the bytes that remain, so that it can be used as an allocation capacity.
    pub(super) fn check_count(
        &self,
        field: &'static str,
        offset: usize,
        value: i64,
        min_size: usize,
    ) -> Result<usize, DecodeError> {
        let count = usize::try_from(value).map_err(|_| DecodeError::Negative {
            message: self.message,
            field,
            offset,
            value,
        })?;
        let remaining = self.remaining();
        if count
            .checked_mul(min_size)
            .is_none_or(|needed| needed > remaining)
        {
            return Err(DecodeError::TooLarge {
                message: self.message,
                field,
                offset,
                len: u64::try_from(count).unwrap_or(u64::MAX),
                remaining,
            });
        }
        Ok(count)
    }

    /// TupleData: an Int16 column count, then each column's kind and value.
    pub(super) fn get_tuple(&mut self) -> Result<Vec<TupleValue>, DecodeError> {
        let offset = self.pos;
        let count = self.get_i16("tuple column count")?;
        let count = self.check_count(
            "tuple column count",
            offset,
            i64::from(count),
            MIN_TUPLE_COLUMN_BYTES,
        )?;
        let mut values = Vec::with_capacity(count);
        for _ in 0..count {
            let offset = self.pos;
            let value = match self.get_u8("tuple column kind")? {
                b'n' => TupleValue::Null,
                b'u' => TupleValue::UnchangedToast,
                b't' => TupleValue::Text(
                    self.get_counted("text value length", "text value")?
                        .to_vec(),
                ),
                b'b' => TupleValue::Binary(
                    self.get_counted("binary value length", "binary value")?
                        .to_vec(),
                ),
                kind => {
                    return Err(DecodeError::UnknownTupleKind {
                        message: self.message,
                        kind,
                        offset,
                    });
                }
            };
            values.push(value);
        }
        Ok(values)
    }

    pub(super) fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes {
                message: self.message,
                offset: self.pos,
                extra,
            }),
        }
    }
}

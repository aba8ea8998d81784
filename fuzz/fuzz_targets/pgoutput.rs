//! Fuzzes the pgoutput decoder: any bytes, in and out of a streamed block, must decode
//! or fail with an error, never panic. The decoder is in the core crate, without the
//! engine and its storage.
#![no_main]

use libfuzzer_sys::fuzz_target;

use weir_core::pg::pgoutput;

fuzz_target!(|data: &[u8]| {
    let _ = pgoutput::decode(data, false);
    let _ = pgoutput::decode(data, true);
    let mut decoder = pgoutput::Decoder::new();
    for message in data.split(|b| *b == 0xFE) {
        let _ = decoder.decode(message);
    }
});

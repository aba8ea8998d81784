//! Fuzzes the TOML config parser: any text must parse into a validated config or fail
//! with an error naming the file, never panic. Bytes that are not UTF-8 are read lossily
//! (as U+FFFD), so that every input still reaches the parser.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weir_core::config::Config;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("conf/weir.toml");
    match Config::parse(&text, path) {
        Ok(config) => {
            // What the engine reads of a config right after loading it.
            let _ = config.source_id();
            for table in &config.tables {
                let _ = table.target.quoted();
                assert!(config.table_by_source(&table.source).is_some());
                assert!(config.table_by_target(&table.target.to_string()).is_some());
            }
        }
        Err(e) => assert!(e.to_string().starts_with("conf/weir.toml")),
    }
});

//! The log API never cuts a character: a log of two-byte characters, read in 256 KiB chunks
//! from an odd offset (so every chunk limit falls inside one), comes back as chunks that are
//! each valid UTF-8 and together are the log; an offset inside a character starts after it.

use crate::common::http_client::{get, http_address};
use crate::common::*;

#[test]
fn log_chunks_end_and_start_on_character_boundaries() {
    // One ASCII byte, then 300,000 'é' (600,000 bytes): the 256 KiB limits fall mid-character.
    let f = Fleet::new(&format!(
        "http_listen = \"127.0.0.1:0\"\n[projects.p]\ncommand = {}\n",
        sh("printf a; i=0; while [ $i -lt 3000 ]; do printf 'éééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé'; i=$((i+1)); done")
    ));
    let d = f.start_daemon();
    let addr = http_address(&d);
    let id = f.enqueue("p");
    f.wait_status(id, "succeeded");
    let whole = f.logs(id);
    assert_eq!(whole.len(), 1 + 600_000, "the command's output");

    let mut offset = 0u64;
    let mut joined = Vec::new();
    let mut chunks = 0;
    loop {
        let a = get(&addr, &format!("/api/runs/{id}/log?offset={offset}"));
        assert_eq!(a.status, 200);
        if a.body.is_empty() {
            break;
        }
        std::str::from_utf8(&a.body)
            .unwrap_or_else(|e| panic!("chunk {chunks} from {offset} is not UTF-8: {e}"));
        joined.extend_from_slice(&a.body);
        offset = a.header("x-log-next-offset").unwrap().parse().unwrap();
        chunks += 1;
    }
    assert!(chunks >= 3, "{chunks} chunks");
    assert_eq!(joined, whole.as_bytes());

    // Offset 2 is inside the first 'é' (bytes 1 and 2): the chunk starts at byte 3.
    let a = get(&addr, &format!("/api/runs/{id}/log?offset=2"));
    std::str::from_utf8(&a.body).expect("a chunk from inside a character");
    assert_eq!(
        a.header("x-log-next-offset").unwrap(),
        (3 + a.body.len()).to_string()
    );
}

//! A time flag that is no duration (negative, not a number, infinite, or too long to add to the
//! clock) stops every subcommand at startup with a clear error, never a panic.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use switchyard_tests::binary;

fn refused(args: &[&str], flag: &str) {
    let mut child = Command::new(binary())
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits") {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().expect("kills");
            panic!("{args:?} was accepted: still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut stderr)
        .expect("reads");
    assert!(!status.success(), "{args:?} was accepted");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert!(
        stderr.contains(&format!("Error: --{flag} must be")),
        "{args:?} said: {stderr}"
    );
}

#[test]
fn bad_time_flags_are_refused_at_startup() {
    let sim = ["--backend", "sim", "--port", "0"];
    for bad in ["-1", "NaN", "1e300"] {
        let flag = |name: &str| format!("--{name}={bad}");
        let drain = flag("drain-timeout");
        refused(
            &[&["engine"], &sim[..], &[&drain]].concat(),
            "drain-timeout",
        );
        refused(&[&["serve"], &sim[..], &[&drain]].concat(), "drain-timeout");
        let gateway = [
            "gateway",
            "--port",
            "0",
            "--scheduler",
            "http://127.0.0.1:1",
        ];
        let queue = flag("queue-timeout");
        refused(&[&gateway[..], &[&queue]].concat(), "queue-timeout");
        let request = flag("request-timeout");
        refused(&[&gateway[..], &[&request]].concat(), "request-timeout");
        let bench = ["bench", "--url", "http://127.0.0.1:1", "--model", "m"];
        refused(&[&bench[..], &[&request]].concat(), "request-timeout");
    }
    refused(
        &[
            "scheduler",
            "--port",
            "0",
            "--instances",
            "http://127.0.0.1:1",
            "--discovery-interval",
            "inf",
        ],
        "discovery-interval",
    );
}

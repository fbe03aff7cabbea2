//! A number flag that is not what it says (a negative, NaN or infinite number, a duration too
//! long to add to the clock, a share above 1) stops every subcommand at startup with a clear
//! error naming the flag, never a panic.

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
        stderr.contains("invalid value") && stderr.contains(&format!("--{flag}")),
        "{args:?} said: {stderr}"
    );
}

#[test]
fn bad_number_flags_are_refused_at_startup() {
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
    let scheduler = [
        "scheduler",
        "--port",
        "0",
        "--instances",
        "http://127.0.0.1:1",
    ];
    for (bad, flag) in [
        ("--discovery-interval=inf", "discovery-interval"),
        ("--discovery-interval=-5", "discovery-interval"),
        ("--gateway-timeout=0", "gateway-timeout"),
        ("--startup-wait=-1", "startup-wait"),
    ] {
        refused(&[&scheduler[..], &[bad]].concat(), flag);
    }
    for (bad, flag) in [
        ("--gpu-memory-utilization=1.5", "gpu-memory-utilization"),
        ("--sim-time-scale=0", "sim-time-scale"),
        ("--kv-offloading-size=-2", "kv-offloading-size"),
        (
            "--global-requests-per-minute=-3",
            "global-requests-per-minute",
        ),
        ("--first-byte-timeout=NaN", "first-byte-timeout"),
    ] {
        refused(&[&["serve"], &sim[..], &[bad]].concat(), flag);
    }
    for (bad, flag) in [
        ("--rate=-1", "rate"),
        ("--burstiness=0", "burstiness"),
        ("--suite-seconds=-60", "suite-seconds"),
    ] {
        refused(&["sim", bad], flag);
    }
}

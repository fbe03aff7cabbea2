//! docs/getting-started.md as written: the one-process quick start's commands (the `curl`s
//! against `serve`, and the OpenAI SDK snippet) run against a real `serve` (on free ports instead
//! of 8000), and every command block of the page says how it is tested or that it needs a
//! cluster or a GPU.

use std::process::Command;
use switchyard_tests::{python_has, until_completing, Process};

fn page() -> String {
    let path =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/getting-started.md");
    std::fs::read_to_string(path).expect("docs/getting-started.md")
}

/// The page's code blocks: their language and text, with the paragraph before each.
fn blocks(page: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut rest = page;
    while let Some(start) = rest.find("```") {
        let before = &rest[..start];
        let paragraph = before
            .trim_end()
            .rsplit("\n\n")
            .next()
            .unwrap_or_default()
            .to_string();
        let after = &rest[start + 3..];
        let (lang, body) = after.split_once('\n').unwrap_or((after, ""));
        let end = body.find("```").expect("a closed block");
        out.push((lang.trim().to_string(), body[..end].to_string(), paragraph));
        rest = &body[end + 3..];
    }
    out
}

#[test]
fn every_command_block_says_how_it_is_tested_or_what_it_needs() {
    let page = page();
    let blocks = blocks(&page);
    assert!(blocks.len() >= 4, "the page's blocks: {}", blocks.len());
    for (lang, body, paragraph) in &blocks {
        let marked = ["tested as written", "Needs a cluster", "needs a GPU"]
            .iter()
            .any(|m| paragraph.contains(m));
        assert!(
            marked,
            "a ```{lang} block is not marked as tested or as needing a cluster or a GPU:\n{body}"
        );
    }
}

#[tokio::test]
async fn the_one_process_quick_start_runs_as_written() {
    let page = page();
    let blocks = blocks(&page);
    let serve = Process::serve(2, &[]).await;
    until_completing(&serve.url(0)).await;
    let base = serve.url(0);
    let host = base.trim_start_matches("http://");
    let (_, commands, _) = blocks
        .iter()
        .find(|(lang, body, _)| lang == "sh" && body.contains("-- serve"))
        .expect("the serve block");
    // Its `curl` commands, one per (continued) line, against this serve.
    let joined = commands.replace("\\\n", " ");
    for line in joined
        .lines()
        .filter(|l| l.trim_start().starts_with("curl"))
    {
        let line = line.replace("localhost:8000", host);
        let out = Command::new("sh").args(["-c", &line]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{line}");
        assert!(
            !text.is_empty() && !text.contains("\"error\":{"),
            "{line}: {text}"
        );
    }
    if !python_has("openai") {
        assert!(
            std::env::var("CI").is_err(),
            "CI installs the openai package"
        );
        eprintln!("skipped the SDK snippet: pip install openai");
        return;
    }
    let (_, script, _) = blocks
        .iter()
        .find(|(lang, _, _)| lang == "python")
        .expect("the SDK block");
    let script = script.replace("http://localhost:8000", &base);
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

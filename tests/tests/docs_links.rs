//! Every relative link in the README, BENCHMARKS.md, RELIABILITY.md and docs/ points at a file
//! of the repository (the docs move; their links must follow).

use std::path::{Path, PathBuf};

/// The relative link targets of a markdown text (`[text](target)`, not `http...`, not `#...`).
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("](") {
        rest = &rest[start + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        if !(target.starts_with("http") || target.starts_with('#') || target.contains(' ')) {
            out.push(target.split('#').next().unwrap_or_default().to_string());
        }
        rest = &rest[end..];
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_points_at_a_file() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages: Vec<PathBuf> = ["README.md", "BENCHMARKS.md", "RELIABILITY.md"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/ exists") {
        let path = entry.expect("readable").path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("readable");
        let folder = page.parent().unwrap_or(Path::new("."));
        for link in relative_links(&text) {
            if !folder.join(&link).exists() {
                broken.push(format!("{}: {link}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every SVG under `folder`, at any depth.
fn svgs(folder: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(folder).expect("readable folder") {
        let path = entry.expect("readable").path();
        if path.is_dir() {
            found.extend(svgs(&path));
        } else if path.extension().is_some_and(|e| e == "svg") {
            found.push(path);
        }
    }
    found
}

#[test]
fn every_picture_in_the_docs_has_a_png_beside_its_svg() {
    let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let missing: Vec<String> = svgs(&docs)
        .into_iter()
        .filter(|svg| !svg.with_extension("png").exists())
        .map(|svg| svg.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "SVGs without a PNG (run scripts/svg_to_png.py):\n{}",
        missing.join("\n")
    );
}

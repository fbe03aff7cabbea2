//! The configuration reference (`docs/configuration.md`): every subcommand's flags with their
//! environment variables, defaults and descriptions, written from the CLI's own definitions by
//! `switchyard reference`, so that it cannot drift (a test compares the committed file).

use clap::builder::ArgAction;
use clap::Command;
use std::fmt::Write;

/// A table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The flag column of `arg`: `--name VALUE` (or `--name` for a switch).
fn flag(arg: &clap::Arg) -> String {
    let name = match arg.get_long() {
        Some(long) => format!("--{long}"),
        None => arg.get_id().to_string().to_uppercase(),
    };
    let takes_value = !matches!(
        arg.get_action(),
        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
    );
    match (takes_value, arg.get_value_names()) {
        (false, _) => format!("`{name}`"),
        (true, Some(names)) => format!("`{name} {}`", names.join(" ")),
        (true, None) => format!("`{name} {}`", arg.get_id().to_string().to_uppercase()),
    }
}

/// The reference of `root`'s subcommands, in the order they are declared.
pub fn configuration_reference(root: &Command) -> String {
    let mut out = String::new();
    let name = root.get_name();
    let _ = writeln!(out, "# Configuration reference\n");
    let _ = writeln!(
        out,
        "Every flag of every `{name}` subcommand, with the environment variable that sets it \
         where there is one (a flag given on the command line wins) and its default. Written by \
         `{name} reference > docs/configuration.md` from the CLI's definitions; a test fails \
         when this file differs from what the binary says.\n"
    );
    for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
        let _ = writeln!(out, "## `{name} {}`\n", sub.get_name());
        if let Some(about) = sub.get_about() {
            let _ = writeln!(out, "{}\n", cell(&about.to_string()));
        }
        let args: Vec<_> = sub
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
            .collect();
        if args.is_empty() {
            continue;
        }
        let _ = writeln!(out, "| flag | environment | default | description |");
        let _ = writeln!(out, "|---|---|---|---|");
        for arg in args {
            let env = arg
                .get_env()
                .map(|e| format!("`{}`", e.to_string_lossy()))
                .unwrap_or_default();
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().to_string())
                .collect();
            let default = match (defaults.is_empty(), arg.get_action()) {
                (true, _) | (false, ArgAction::SetTrue) => String::new(),
                (false, _) => format!("`{}`", defaults.join(",")),
            };
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| cell(&h.to_string()))
                .unwrap_or_default();
            let _ = writeln!(out, "| {} | {env} | {default} | {help} |", flag(arg));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_configuration_reference_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        let current = configuration_reference(&crate::Cli::command());
        assert!(
            committed == current,
            "docs/configuration.md is stale: run `cargo run -- reference > docs/configuration.md`"
        );
        // Every flag of every subcommand is in it.
        for sub in crate::Cli::command().get_subcommands() {
            for arg in sub.get_arguments().filter_map(|a| a.get_long()) {
                assert!(
                    arg == "help" || sub.is_hide_set() || current.contains(&format!("`--{arg}")),
                    "--{arg} of {} is missing",
                    sub.get_name()
                );
            }
        }
    }
}

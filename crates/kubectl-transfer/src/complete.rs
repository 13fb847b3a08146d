//! Completion of `kubectl transfer …` on the command line. kubectl (1.26 and
//! later) completes a plugin's arguments by running `kubectl_complete-<name>`
//! from `PATH` with the words typed after the plugin's name, the last one
//! being the word to complete, and reads the candidates one per line and then
//! `:<directive>`, the protocol of cobra's `__complete`. The plugin's binary
//! answers it when it is run under that name (a link to it).
//!
//! [`candidates`] is pure: the words in, the candidates out, with the
//! transfer names of a namespace asked for through [`Need`].

use clap::{Arg, Command};

/// cobra's `ShellCompDirectiveNoFileComp`: no file names as candidates.
pub const NO_FILE_COMPLETION: u32 = 4;

/// What the candidates need from the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    Nothing,
    /// The names of the transfers in the namespace `-n` names (or the
    /// context's), starting with `prefix`.
    TransferNames {
        prefix: String,
    },
}

/// The candidates for the last of `words` (the words after `transfer`).
pub fn candidates(root: &Command, words: &[String]) -> (Vec<String>, Need) {
    let Some((word, before)) = words.split_last() else {
        return (subcommands(root, ""), Need::Nothing);
    };
    let mut cmd = root;
    let mut positionals = 0;
    let mut skip_value = false;
    let mut previous: Option<&Arg> = None;
    for w in before {
        if skip_value {
            skip_value = false;
            previous = None;
            continue;
        }
        if let Some(flag) = w.strip_prefix('-').filter(|_| w.len() > 1) {
            previous = find_flag(cmd, flag);
            skip_value = !w.contains('=') && previous.is_some_and(takes_value);
            continue;
        }
        previous = None;
        match cmd.find_subcommand(w.as_str()) {
            Some(sub) if positionals == 0 && std::ptr::eq(cmd, root) => cmd = sub,
            _ => positionals += 1,
        }
    }
    if skip_value {
        // Completing a flag's value.
        return (values_of(previous, word), Need::Nothing);
    }
    if word.starts_with('-') {
        return (flags(cmd, word), Need::Nothing);
    }
    if std::ptr::eq(cmd, root) {
        return (subcommands(root, word), Need::Nothing);
    }
    let first_positional = cmd.get_positionals().next();
    match (cmd.get_name(), positionals) {
        ("status" | "cancel", 0) => (
            Vec::new(),
            Need::TransferNames {
                prefix: word.clone(),
            },
        ),
        (_, 0) => (values_of(first_positional, word), Need::Nothing),
        _ => (Vec::new(), Need::Nothing),
    }
}

/// The values `arg` allows that start with `prefix`.
fn values_of(arg: Option<&Arg>, prefix: &str) -> Vec<String> {
    arg.map(|a| {
        a.get_possible_values()
            .iter()
            .map(|v| v.get_name().to_owned())
            .filter(|v| v.starts_with(prefix))
            .collect()
    })
    .unwrap_or_default()
}

fn subcommands(root: &Command, prefix: &str) -> Vec<String> {
    root.get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_owned())
        .filter(|n| n.starts_with(prefix) && n != "help")
        .collect()
}

fn flags(cmd: &Command, prefix: &str) -> Vec<String> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .filter(|f| f.starts_with(prefix))
        .collect()
}

fn find_flag<'a>(cmd: &'a Command, flag: &str) -> Option<&'a Arg> {
    let name = flag.split('=').next().unwrap_or_default();
    match name.strip_prefix('-') {
        Some(long) => cmd.get_arguments().find(|a| a.get_long() == Some(long)),
        None => {
            let mut chars = name.chars();
            let short = chars.next()?;
            cmd.get_arguments().find(|a| a.get_short() == Some(short))
        }
    }
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|n| n.min_values() > 0)
}

/// The value of `-n`/`--namespace` among `words`, if given.
pub fn namespace_in(words: &[String]) -> Option<String> {
    let mut iter = words.iter();
    while let Some(w) = iter.next() {
        for flag in ["-n", "--namespace"] {
            if w == flag {
                return iter.next().cloned();
            }
            if let Some(v) = w.strip_prefix(&format!("{flag}=")) {
                return Some(v.to_owned());
            }
        }
    }
    None
}

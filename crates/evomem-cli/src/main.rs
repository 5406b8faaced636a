//! `evomem`: the command-line tool. Thin: parses flags and calls the library
//! crates. Each subcommand lives in its own `cmd_*` module.

// The flags' doc comments are clap's help texts, where `[default]` in
// brackets is the default a flag shows, not a link.
#![allow(rustdoc::broken_intra_doc_links)]

#[cfg(feature = "arena")]
mod cmd_arena;
#[cfg(feature = "arena")]
mod cmd_arena_delayed;
#[cfg(feature = "arena")]
mod cmd_arena_generation;
mod cmd_bench;
#[cfg(all(feature = "gguf", feature = "http"))]
mod cmd_bench_llm;
mod cmd_bench_scale;
#[cfg(feature = "serve")]
mod cmd_bench_service;
mod cmd_bench_train;
mod cmd_compare;
mod cmd_embed;
mod cmd_eval;
mod cmd_explain;
mod cmd_inspect;
mod cmd_llm;
#[cfg(feature = "serve")]
mod cmd_mcp;
#[cfg(feature = "serve")]
mod cmd_serve;
#[cfg(feature = "ui")]
mod cmd_ui;
mod pick;
mod reads;
mod settings;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

/// mimalloc instead of glibc's malloc. The policies allocate and free
/// millions of small strings and vectors per run (AtomRec: 1.95M ops on
/// ml-100k), and an evaluation frees on one thread what another allocated
/// (the op log's writer); glibc's malloc and free were 15% of an AtomRec run.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// evomem: memory policies for LLM recommender agents, evaluated on real data.
#[derive(Parser)]
#[command(name = "evomem", version, about)]
struct Cli {
    /// Settings file (default: $EVOMEM_CONFIG, else ./evomem.toml when it
    /// exists). Layers: built-in defaults, this file, EVOMEM_* variables,
    /// then flags.
    #[arg(long, global = true)]
    config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// The family table as `--help` shows it: every policy, its keys with
/// their defaults, and its ablation grids.
fn policy_help() -> String {
    format!(
        "Policies (`NAME` or `NAME[key=value,…]`; `all` = every family that ranks):\n{}",
        evomem_policy::registry::help_text()
    )
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate one or more policies under a ranking protocol.
    #[command(after_help = policy_help())]
    Eval(cmd_eval::Args),
    /// Run a named ablation grid of one policy into one report.
    #[command(after_help = policy_help())]
    Ablate(cmd_eval::AblateArgs),
    /// Compare two runs: metric deltas with paired bootstrap CIs.
    Compare(cmd_compare::Args),
    /// Embed texts and print pairwise cosine similarities.
    Embed(cmd_embed::Args),
    /// Talk to a language model backend.
    Llm(cmd_llm::Args),
    /// Print a user's memory lifecycle timeline from a run.
    Inspect(cmd_inspect::Args),
    /// Print the evidence paths behind a user's top-ranked candidate.
    Explain(cmd_explain::Args),
    /// Benchmarks that print ratios against a baseline from the same run.
    Bench(cmd_bench::Args),
    /// Lifelong-task arenas: LifelongAgentBench DB tasks in SQLite, and the
    /// recurrent bandit toy (RoMeRL, MemRL and variants).
    #[cfg(feature = "arena")]
    Arena(cmd_arena::Args),
    /// The memory engine as an HTTP service (multi-tenant, crash-safe).
    #[cfg(feature = "serve")]
    Serve(cmd_serve::Args),
    /// evomem's memory as MCP tools on stdio, for agents: a data folder in
    /// process (--data-dir) or a running service (--url).
    #[cfg(feature = "serve")]
    Mcp(cmd_mcp::Args),
    /// The web inspector over a run folder (or two, compared) on 127.0.0.1.
    #[cfg(feature = "ui")]
    Ui(cmd_ui::Args),
}

/// The command line with each flag that overrides a setting showing that
/// setting's default: a flag whose help names its key in backticks and
/// parentheses (`(`serve.bind`)`) and has no default of its own gets
/// `[default: VALUE]` with the value of [`settings::Settings::default`],
/// so the help cannot drift from the settings (a key without a default,
/// such as `serve.keys_file`, keeps the default its help states).
fn command() -> clap::Command {
    let defaults = serde_json::to_value(settings::Settings::default()).unwrap_or_default();
    with_setting_defaults(Cli::command(), &defaults)
}

/// [`command`]'s rewrite of `cmd` and its subcommands.
fn with_setting_defaults(cmd: clap::Command, defaults: &serde_json::Value) -> clap::Command {
    let mut cmd = cmd;
    let ids: Vec<String> = cmd
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    for id in ids {
        cmd = cmd.mut_arg(id, |a| {
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            if !a.get_default_values().is_empty() {
                return a;
            }
            let Some(value) = setting_named_in(&help).and_then(|k| setting_default(defaults, k))
            else {
                return a;
            };
            a.help(format!("{help} [default: {value}]"))
        });
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in subs {
        cmd = cmd.mut_subcommand(name, |c| with_setting_defaults(c, defaults));
    }
    cmd
}

/// The settings key a help text names as "(`key`)", the last one.
fn setting_named_in(help: &str) -> Option<&str> {
    let end = help.rfind("`)")?;
    let start = help.get(..end)?.rfind("(`")? + 2;
    let key = help.get(start..end)?;
    key.chars()
        .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
        .then_some(key)
}

/// The default of `key` (dotted) in the serialized settings, as shown in
/// help; `None` when it is null or not a scalar.
fn setting_default(defaults: &serde_json::Value, key: &str) -> Option<String> {
    let v = key.split('.').try_fold(defaults, |v, k| v.get(k))?;
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The flags typed on the command line of the command `path` (whose
/// matches are `m`; `chain` is the command and its ancestors, the leaf
/// last), each with the settings key it overrides ([`reads::flag_key`];
/// `keys` is every settings key).
fn given_flags(
    path: &[&str],
    m: &clap::ArgMatches,
    chain: &[clap::Command],
    keys: &[String],
) -> Vec<reads::Given> {
    let Some(entry) = reads::entry(path) else {
        return Vec::new();
    };
    m.ids()
        .filter(|id| m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .filter_map(|id| {
            let arg = chain
                .iter()
                .rev()
                .find_map(|c| c.get_arguments().find(|a| a.get_id() == id))?;
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let spelt = arg
                .get_long()
                .map_or_else(|| id.to_string(), |l| format!("--{l}"));
            Some(reads::Given {
                id: id.to_string(),
                key: reads::flag_key(id.as_str(), &help, entry, keys),
                spelt,
            })
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    // candle runs large elementwise ops on a pool of its own whose idle
    // workers spin: on two cores, a third of a training epoch went to
    // spinning. With one thread that pool has no workers; the trained
    // baselines' parallel work (matrix products, their fused ops) runs on
    // the rayon pool sized by the `threads` setting. Set before any thread
    // starts, while the process is single-threaded.
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("EVOMEM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().collect();
    if let Some(msg) = missing_command(&args, GATED) {
        eprintln!("error: {msg}");
        std::process::exit(2);
    }
    let matches = command().get_matches();
    let cli = Cli::from_arg_matches(&matches)
        .map_err(|e| e.format(&mut command()))
        .unwrap_or_else(|e| e.exit());
    if let Some(file) = &cli.config {
        // Child `evomem` processes (`bench scale`, `bench train`, `bench
        // service`) read the same file. Set while single-threaded.
        std::env::set_var(
            "EVOMEM_CONFIG",
            std::path::absolute(file).unwrap_or_else(|_| file.clone()),
        );
    }
    let (settings, explicit) =
        settings::Settings::load(&settings::Sources::process(cli.config.as_deref()))?;
    // A key the user set that this command does not read: said, not
    // dropped in silence (on stderr: `evomem mcp` speaks on stdout).
    let mut path = Vec::new();
    let mut m = &matches;
    let mut chain = vec![command()];
    while let Some((name, sub)) = m.subcommand() {
        path.push(name);
        m = sub;
        if let Some(c) = chain.last().and_then(|c| c.find_subcommand(name)) {
            chain.push(c.clone());
        }
    }
    let keys = reads::settings_keys();
    let given = given_flags(&path, m, &chain, &keys);
    let env: Vec<(String, String)> = std::env::vars().collect();
    for line in reads::notices(&path, &given, &explicit)
        .into_iter()
        .chain(settings::unknown_variables(&env, &keys))
    {
        eprintln!("{line}");
    }
    match cli.command {
        Command::Eval(a) => cmd_eval::run(a, settings),
        Command::Ablate(a) => cmd_eval::run_ablate(a, settings),
        Command::Compare(a) => cmd_compare::run(a),
        Command::Embed(a) => cmd_embed::run(a, &settings),
        Command::Llm(a) => cmd_llm::run(a, &settings),
        Command::Inspect(a) => cmd_inspect::run(a),
        Command::Explain(a) => cmd_explain::run(a),
        Command::Bench(a) => cmd_bench::run(a, &settings),
        #[cfg(feature = "arena")]
        Command::Arena(a) => cmd_arena::run(a, settings),
        #[cfg(feature = "serve")]
        Command::Serve(a) => cmd_serve::run(a, settings),
        #[cfg(feature = "serve")]
        Command::Mcp(a) => cmd_mcp::run(a, settings),
        #[cfg(feature = "ui")]
        Command::Ui(a) => cmd_ui::run(a),
    }
}

/// The commands behind a cargo feature: (command, feature, in this build).
const GATED: &[(&str, &str, bool)] = &[
    ("arena", "arena", cfg!(feature = "arena")),
    ("serve", "serve", cfg!(feature = "serve")),
    ("mcp", "serve", cfg!(feature = "serve")),
    ("ui", "ui", cfg!(feature = "ui")),
];

/// The message for a command that this build lacks (the lean binary of
/// `scripts/quickstart.sh` has no `ui`, `serve`, `mcp` or `arena`): which
/// feature has it and how to build it, instead of clap's "unrecognized
/// subcommand".
fn missing_command(args: &[String], gated: &[(&str, &str, bool)]) -> Option<String> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--config" {
            it.next();
            continue;
        }
        if a.starts_with('-') {
            continue;
        }
        return gated
            .iter()
            .find(|(c, _, has)| c == a && !has)
            .map(|(c, f, _)| {
                format!(
                    "`evomem {c}` is not in this binary: it was built without the `{f}` feature \
                     (scripts/quickstart.sh builds the lean one). Build every feature with \
                     `cargo build --release -p evomem`, or add `--features {f}`"
                )
            });
    }
    None
}

#[cfg(test)]
mod missing_tests {
    use super::missing_command;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_command_of_a_feature_left_out_names_the_feature() {
        let lean = [("ui", "ui", false), ("serve", "serve", true)];
        let m = missing_command(
            &args(&["evomem", "--config", "ui", "ui", "--run", "x"]),
            &lean,
        );
        assert!(m.is_some_and(|m| m.contains("`evomem ui`") && m.contains("--features ui")));
        assert_eq!(missing_command(&args(&["evomem", "serve"]), &lean), None);
        assert_eq!(
            missing_command(&args(&["evomem", "eval", "ui"]), &lean),
            None
        );
        assert_eq!(missing_command(&args(&["evomem"]), &lean), None);
        // Every gated command is one of this build's when its feature is on.
        for (c, _, has) in super::GATED {
            if *has {
                assert_eq!(missing_command(&args(&["evomem", c]), super::GATED), None);
            }
        }
    }
}

#[cfg(test)]
mod help_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The rendered long help of the subcommand at `path`.
    #[cfg(feature = "serve")]
    fn help(path: &[&str]) -> String {
        let mut c = command();
        // Global flags reach the subcommands when the command is built.
        c.build();
        for p in path {
            c = c.find_subcommand(p).unwrap().clone();
        }
        c.render_long_help().to_string()
    }

    #[test]
    fn a_flag_over_a_setting_shows_the_settings_default() {
        assert_eq!(
            setting_named_in("Address (`serve.bind`)."),
            Some("serve.bind")
        );
        assert_eq!(
            setting_named_in("`sqlite` or a URL (`serve.store`)"),
            Some("serve.store")
        );
        assert_eq!(setting_named_in("no key (`a b`)"), None);
        assert_eq!(setting_named_in("plain"), None);
        let d = serde_json::to_value(settings::Settings::default()).unwrap();
        assert_eq!(setting_default(&d, "eval.seed").as_deref(), Some("42"));
        assert_eq!(setting_default(&d, "no.such"), None);
        #[cfg(feature = "serve")]
        {
            let serve = help(&["serve"]);
            let want = evomem_serve::ServeConfig::default();
            for line in [
                format!("[default: {}]", want.bind),
                format!("[default: {}]", want.data_dir.display()),
                format!("[default: {}]", want.store),
                format!("[default: {}]", want.embedder),
            ] {
                assert!(serve.contains(&line), "{line} missing from:\n{serve}");
            }
            // Global flags show it in subcommands too; a key without a
            // default (keys_file) gets none.
            assert!(help(&["serve", "check"]).contains(&format!("[default: {}]", want.bind)));
            assert!(!serve.contains("keys.toml]"), "{serve}");
            assert!(help(&["mcp"]).contains(&format!("[default: {}]", want.store)));
        }
    }
}

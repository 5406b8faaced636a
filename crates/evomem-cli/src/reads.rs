//! Which settings each command reads, in one table ([`READS`]), and the
//! notice for a key a user set (in the settings file or an `EVOMEM_*`
//! variable) that the running command does not read:
//!
//! ```text
//! notice: setting serve.bind (from EVOMEM_SERVE__BIND) is not used by this command (evomem embed)
//! ```
//!
//! A notice, not a refusal: one `evomem.toml` legitimately holds keys for
//! many commands. Notices go to stderr (`evomem mcp` speaks its protocol
//! on stdout). The tests below keep the table honest both ways: every
//! command `--help` lists has an entry, every entry is a command, and every
//! key of the settings types is read by at least one command; and every
//! flag's field is named somewhere besides its declaration.
//!
//! A command counts as reading a key when it reads it under some of its
//! flags, unless a flag given narrows it ([`Reads::alone`]: `evomem mcp
//! --url` reads only `threads`). A key that a flag given on this run
//! overrides gets a notice of its own ([`flag_key`]):
//!
//! ```text
//! notice: setting eval.seed (from EVOMEM_EVAL__SEED) is overridden by --seed on this run
//! ```

use crate::settings::Explicit;

/// The settings one command reads.
pub struct Reads {
    /// The command as typed after `evomem`, e.g. `serve keys`. An entry
    /// for a group that needs a subcommand (`serve keys`, `bench`) covers
    /// all of them; a command that runs on its own (`serve`) covers only
    /// itself.
    pub command: &'static str,
    /// Keys (`eval.seed`) or whole tables (`eval`) it reads. `*`: every
    /// key, for a command that hands the settings to a child `evomem`,
    /// which reports what it does not read itself.
    pub keys: &'static [&'static str],
    /// Keys inside those tables it does not read.
    pub except: &'static [&'static str],
    /// Flags that narrow what it reads: given the flag (its clap id), the
    /// command reads only the keys beside it (`evomem mcp --url` forwards
    /// to a running service and reads only `threads`).
    pub alone: &'static [(&'static str, &'static [&'static str])],
}

/// `key` is `table` or lies under it.
fn under(key: &str, table: &str) -> bool {
    key.strip_prefix(table)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

impl Reads {
    /// Whether this command reads the settings key `key` under some of its
    /// flags.
    pub fn reads(&self, key: &str) -> bool {
        self.keys.iter().any(|k| *k == "*" || under(key, k))
            && !self.except.iter().any(|k| under(key, k))
    }

    /// Whether this command reads `key` when run with the flags `given`
    /// (clap ids): a flag of [`Reads::alone`] narrows it to its keys.
    pub fn reads_with(&self, key: &str, given: &[&str]) -> bool {
        match self.alone.iter().find(|(flag, _)| given.contains(flag)) {
            Some((_, only)) => only.iter().any(|k| under(key, k)),
            None => self.reads(key),
        }
    }
}

/// A command reading nothing.
const fn none(command: &'static str) -> Reads {
    Reads {
        command,
        keys: &[],
        except: &[],
        alone: &[],
    }
}

/// What `evomem eval` and `evomem ablate` read: the embedder's settings,
/// the `[llm]` table and the `[eval]` table.
const EVAL: &[&str] = &[
    "models_dir",
    "threads",
    "embedder",
    "embed_cache",
    "llm",
    "eval",
];

/// What the arenas that embed and call models read.
#[cfg(feature = "arena")]
const ARENA: &[&str] = &["models_dir", "threads", "embedder", "embed_cache", "llm"];

/// What a service over a data folder reads: `open_shared` in `cmd_serve`
/// (the embedder, the LLM hub, the seed) and the `[serve]` table.
#[cfg(feature = "serve")]
const SERVICE: &[&str] = &["models_dir", "threads", "llm", "eval.seed", "serve"];

/// The `[serve]` keys of the listener: read only by a service that
/// listens (`evomem serve`).
#[cfg(feature = "serve")]
const LISTENER: &[&str] = &[
    "serve.bind",
    "serve.max_connections",
    "serve.max_connections_per_address",
    "serve.header_timeout_s",
    "serve.idle_timeout_s",
    "serve.drain_s",
    "serve.metrics_key",
];

/// [`LISTENER`] and the keys file: what `evomem mcp` does not read (it
/// opens one tenant with a key of its own).
#[cfg(feature = "serve")]
const LISTENER_AND_KEYS: [&str; LISTENER.len() + 1] = {
    let mut out = ["serve.keys_file"; LISTENER.len() + 1];
    let mut i = 0;
    while i < LISTENER.len() {
        out[i] = LISTENER[i];
        i += 1;
    }
    out
};

/// Every command and what it reads. One entry per command `--help` lists
/// (groups that need a subcommand may have one entry for all of them).
pub const READS: &[Reads] = &[
    Reads {
        command: "eval",
        keys: EVAL,
        except: &[],
        alone: &[],
    },
    Reads {
        command: "ablate",
        keys: EVAL,
        except: &[],
        alone: &[],
    },
    none("compare"),
    Reads {
        command: "embed",
        keys: &["models_dir", "threads", "embedder"],
        except: &[],
        // The hashing embedder needs no model folder and no threads.
        alone: &[("hashing", &["embedder"])],
    },
    Reads {
        command: "llm ping",
        // With `--llm-config FILE` that file's `[llm]` table instead.
        keys: &[
            "llm.default",
            "llm.api_key_env",
            "llm.timeout_s",
            "llm.max_retries",
        ],
        except: &[],
        alone: &[],
    },
    #[cfg(feature = "http")]
    none("llm fixture-server"),
    none("inspect"),
    none("explain"),
    Reads {
        command: "bench embed",
        keys: &["models_dir"],
        except: &[],
        alone: &[],
    },
    none("bench index"),
    #[cfg(all(feature = "gguf", feature = "http"))]
    Reads {
        command: "bench llm",
        keys: &["models_dir"],
        except: &[],
        alone: &[],
    },
    #[cfg(feature = "serve")]
    Reads {
        command: "bench service",
        keys: &["models_dir"],
        except: &[],
        alone: &[],
    },
    #[cfg(feature = "serve")]
    none("bench load"),
    // Runs `evomem eval --seed --threads --ops-log off` children.
    Reads {
        command: "bench train",
        keys: &["models_dir", "embedder", "embed_cache", "llm", "eval"],
        except: &["eval.seed", "eval.ops_log"],
        alone: &[],
    },
    none("bench synth"),
    // Runs `evomem eval --seed --ops-log off` and `evomem arena delayed
    // --seed` children (through `bench measure`).
    Reads {
        command: "bench scale",
        keys: EVAL,
        except: &["eval.seed", "eval.ops_log"],
        alone: &[],
    },
    // The hidden wrapper of `bench scale`'s children: they report.
    Reads {
        command: "bench measure",
        keys: &["*"],
        except: &[],
        alone: &[],
    },
    #[cfg(feature = "arena")]
    Reads {
        command: "arena lifelong",
        keys: ARENA,
        except: &[],
        alone: &[],
    },
    #[cfg(feature = "arena")]
    none("arena bandit"),
    #[cfg(feature = "arena")]
    Reads {
        command: "arena delayed",
        keys: ARENA,
        except: &[],
        alone: &[],
    },
    #[cfg(feature = "arena")]
    none("arena generation"),
    #[cfg(feature = "serve")]
    Reads {
        command: "serve",
        keys: SERVICE,
        except: &[],
        alone: &[],
    },
    #[cfg(feature = "serve")]
    Reads {
        command: "serve keys",
        keys: &["serve.data_dir", "serve.keys_file"],
        except: &[],
        alone: &[],
    },
    // Opens every tenant as the service does, listens on nothing.
    #[cfg(feature = "serve")]
    Reads {
        command: "serve check",
        keys: SERVICE,
        except: LISTENER,
        alone: &[],
    },
    #[cfg(feature = "serve")]
    Reads {
        command: "serve backup",
        keys: &["serve.data_dir", "serve.store", "serve.keys_file"],
        except: &[],
        alone: &[],
    },
    #[cfg(feature = "serve")]
    Reads {
        command: "serve reembed",
        keys: SERVICE,
        except: LISTENER,
        alone: &[],
    },
    // Takes the data folder from `--data`.
    #[cfg(feature = "serve")]
    none("serve restore"),
    // The service's routes in process, without a listener or a keys file.
    #[cfg(feature = "serve")]
    Reads {
        command: "mcp",
        keys: SERVICE,
        except: &LISTENER_AND_KEYS,
        // `--url` forwards every tool call to a running service.
        alone: &[("url", &["threads"])],
    },
    #[cfg(feature = "ui")]
    none("ui"),
];

/// The entry of the command `path` (`["serve", "keys", "add"]`): the
/// longest entry it starts with.
pub fn entry(path: &[&str]) -> Option<&'static Reads> {
    READS
        .iter()
        .filter(|r| {
            let words: Vec<&str> = r.command.split(' ').collect();
            path.starts_with(&words)
        })
        .max_by_key(|r| r.command.split(' ').count())
}

/// A flag given on the command line: its clap id, how it is spelt
/// (`--seed`), and the settings key it overrides on this run, if any
/// ([`flag_key`]).
pub struct Given {
    /// The clap id (`ops_log`).
    pub id: String,
    /// As typed: `--ops-log`.
    pub spelt: String,
    /// The key it overrides (`eval.ops_log`).
    pub key: Option<String>,
}

/// The notices for the command `path` run with the flags `given`: one per
/// key in `explicit` that it does not read (every key, for a command
/// without an entry), and one per key a given flag overrides.
///
/// A build without the `serve` feature reads `[serve]` from the settings
/// file (one file serves every build) and uses none of it: its keys get
/// one line together, naming the feature, instead of one each.
pub fn notices(path: &[&str], given: &[Given], explicit: &Explicit) -> Vec<String> {
    let reads = entry(path);
    let ids: Vec<&str> = given.iter().map(|g| g.id.as_str()).collect();
    let command = path.join(" ");
    let mut out = Vec::new();
    let mut unbuilt: Vec<(&str, &[String])> = Vec::new();
    for (key, from) in explicit {
        if reads.is_some_and(|r| r.reads_with(key, &ids)) {
            if let Some(g) = given
                .iter()
                .find(|g| g.key.as_deref().is_some_and(|k| under(key, k)))
            {
                out.push(format!(
                    "notice: setting {key} (from {}) is overridden by {} on this run",
                    from.join(", "),
                    g.spelt
                ));
            }
            continue;
        }
        if !cfg!(feature = "serve") && under(key, "serve") {
            unbuilt.push((key, from));
            continue;
        }
        out.push(format!(
            "notice: setting {key} (from {}) is not used by this command (evomem {command})",
            from.join(", "),
        ));
    }
    if !unbuilt.is_empty() {
        let mut from: Vec<&str> = unbuilt
            .iter()
            .flat_map(|(_, f)| f.iter().map(String::as_str))
            .collect();
        from.sort_unstable();
        from.dedup();
        out.push(format!(
            "notice: the [serve] settings ({}; from {}) are not used: this evomem was built \
             without the `serve` feature (docs/building.md)",
            unbuilt
                .iter()
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
                .join(", "),
            from.join(", ")
        ));
    }
    out
}

/// The settings key that the flag `id` (help text `help`) of a command
/// reading `reads` overrides: the key its help names as "(`key`)"; else a
/// top-level key of the same name (`--threads`, `--embedder`); `--llm` and
/// `--llm-role` for `llm.default` and `llm.roles`; else the key of that
/// name in `[eval]` or `[serve]` when the command reads it (`--seed` is
/// `eval.seed` for `evomem eval`). `keys` is every settings key.
pub fn flag_key(id: &str, help: &str, reads: &Reads, keys: &[String]) -> Option<String> {
    if let Some(k) = crate::setting_named_in(help) {
        return Some(k.to_string());
    }
    let named = match id {
        "llm" => Some("llm.default".to_string()),
        "llm_role" => Some("llm.roles".to_string()),
        _ => None,
    };
    named
        .into_iter()
        .chain(["", "eval.", "serve."].map(|table| format!("{table}{id}")))
        .find(|k| keys.contains(k) && reads.reads(k))
}

/// The fields of the settings struct at `path`, as serde lists them
/// when it refuses an unknown key there; `None` where the value is not
/// a struct (a leaf, or a map such as `llm.roles`).
fn struct_fields(path: &[String]) -> Option<Vec<String>> {
    const UNKNOWN: &str = "no-such-key";
    let mut v = toml::Value::Table(toml::Table::from_iter([(
        UNKNOWN.to_string(),
        toml::Value::Integer(0),
    )]));
    for p in path.iter().rev() {
        v = toml::Value::Table(toml::Table::from_iter([(p.clone(), v)]));
    }
    let err = v.try_into::<crate::settings::Settings>().err()?.to_string();
    // `unknown field `K`, expected one of `a`, `b`` on its first line,
    // then `in `llm`` for a nested table.
    let first = err.lines().next()?;
    let (_, expected) = first.split_once(&format!("unknown field `{UNKNOWN}`, expected "))?;
    Some(
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// Every key of the settings types, dotted (`serve.bind`; a map such
/// as `llm.roles` is one key), found through serde: none is missed,
/// those `None` by default included.
pub fn settings_keys() -> Vec<String> {
    fn walk(path: &[String], out: &mut Vec<String>) {
        match struct_fields(path) {
            None => out.push(path.join(".")),
            Some(fields) => {
                for f in fields {
                    let mut p = path.to_vec();
                    p.push(f);
                    walk(&p, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&[], &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    /// Every command path under `cmd`, with whether it runs on its own (a
    /// leaf, or a command whose subcommand is optional, like `serve`).
    fn commands(cmd: &clap::Command, prefix: &[String], out: &mut Vec<(Vec<String>, bool)>) {
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let mut path = prefix.to_vec();
            path.push(sub.get_name().to_string());
            let runs = !sub.has_subcommands() || !sub.is_subcommand_required_set();
            out.push((path.clone(), runs));
            commands(sub, &path, out);
        }
    }

    fn all_commands() -> Vec<(Vec<String>, bool)> {
        let mut out = Vec::new();
        commands(&crate::Cli::command(), &[], &mut out);
        out
    }

    #[test]
    fn the_settings_keys_are_found_through_serde() {
        let keys = settings_keys();
        for k in [
            "models_dir",
            "threads",
            "embedder",
            "embed_cache",
            "llm.default",
            "llm.roles",
            "llm.user_token_cap",
            "eval.seed",
            "eval.llm_cache_path",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
        }
        assert!(!keys.iter().any(|x| x == "llm.api_key"), "not a setting");
        assert!(!keys.iter().any(|x| x == "llm.llm"), "{keys:?}");
        #[cfg(feature = "serve")]
        for k in ["serve.bind", "serve.keys_file", "serve.metrics_key"] {
            assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
        }
    }

    /// The settings reference names exactly the keys serde finds: the one
    /// this build generates, and (with `serve`, the build it is committed
    /// for) `docs/settings-reference.md` itself.
    #[test]
    fn settings_reference_names_every_key_the_walk_finds() {
        use crate::settings::reference;
        let mut walk = settings_keys();
        walk.sort();
        let check = |name: &str, text: &str| {
            let mut documented = reference::documented_keys(text);
            documented.sort();
            let missing: Vec<&String> = walk.iter().filter(|k| !documented.contains(k)).collect();
            let extra: Vec<&String> = documented.iter().filter(|k| !walk.contains(k)).collect();
            assert!(
                missing.is_empty() && extra.is_empty() && documented.len() == walk.len(),
                "{name}: keys missing from the reference {missing:?}, keys that are not \
                 settings {extra:?} (regenerate with `{}`)",
                reference::REGENERATE
            );
        };
        check(
            &format!("{} as this build generates it", reference::FILE),
            &reference::markdown().unwrap(),
        );
        #[cfg(feature = "serve")]
        {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(reference::FILE);
            let committed = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            check(reference::FILE, &committed);
        }
    }

    #[test]
    fn every_command_has_one_entry_and_every_entry_is_a_command() {
        let all = all_commands();
        assert!(all.len() > 10, "{all:?}");
        for (path, _) in all.iter().filter(|(_, runs)| *runs) {
            let words: Vec<&str> = path.iter().map(String::as_str).collect();
            let Some(e) = entry(&words) else {
                panic!(
                    "`evomem {}` has no entry in reads::READS: say which settings it reads",
                    path.join(" ")
                );
            };
            let e_words: Vec<&str> = e.command.split(' ').collect();
            if e_words != words {
                // Only a group that needs a subcommand covers its
                // subcommands; `serve`'s entry is `serve`'s alone.
                let group = all
                    .iter()
                    .find(|(p, _)| *p == e_words)
                    .is_some_and(|(_, group_runs)| !group_runs);
                assert!(
                    group,
                    "`evomem {}` has no entry of its own in reads::READS (only `{}`'s)",
                    path.join(" "),
                    e.command
                );
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for r in READS {
            assert!(seen.insert(r.command), "`{}` twice in READS", r.command);
            let words: Vec<String> = r.command.split(' ').map(str::to_string).collect();
            assert!(
                all.iter().any(|(p, _)| *p == words),
                "READS names `evomem {}`, which is no command (commands: {:?})",
                r.command,
                all.iter().map(|(p, _)| p.join(" ")).collect::<Vec<_>>()
            );
        }
    }

    /// Every flag's field is named somewhere besides its declaration: a
    /// flag added and never read is caught (the compiler does not warn
    /// about a never-read field of a clap struct). A weak check: it looks
    /// for the name, not for a read of this field.
    #[test]
    fn every_flag_is_named_outside_its_declaration() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut source = String::new();
        for f in std::fs::read_dir(&dir).unwrap() {
            let path = f.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                source.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
        let words = |name: &str| {
            source
                .match_indices(name)
                .filter(|(i, _)| {
                    let ident = |c: char| c.is_alphanumeric() || c == '_';
                    let before = source[..*i].chars().next_back().is_some_and(ident);
                    let after = source[i + name.len()..].chars().next().is_some_and(ident);
                    !before && !after
                })
                .count()
        };
        fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String)>) {
            for a in cmd.get_arguments() {
                out.push((path.to_string(), a.get_id().to_string()));
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), out);
            }
        }
        let mut flags = Vec::new();
        walk(&crate::Cli::command(), "evomem", &mut flags);
        assert!(flags.len() > 100, "{}", flags.len());
        let unread: Vec<String> = flags
            .iter()
            .filter(|(_, id)| words(id) < 2)
            .map(|(cmd, id)| format!("{cmd}: {id}"))
            .collect();
        assert!(unread.is_empty(), "flags never read: {unread:?}");
    }

    #[test]
    fn the_table_names_only_settings_keys() {
        let keys = settings_keys();
        for r in READS {
            for k in r.keys.iter().chain(r.except).filter(|k| **k != "*") {
                assert!(
                    keys.iter().any(|key| under(key, k)),
                    "`{}` in READS names `{k}`, which is no settings key or table",
                    r.command
                );
            }
        }
    }

    #[test]
    fn every_settings_key_is_read_by_some_command() {
        // In a build without `serve`, `[serve]` is read (one file serves
        // every build) and used by no command: its keys get the notice.
        let unread_in_this_build: &[&str] = if cfg!(feature = "serve") {
            &[]
        } else {
            &["serve"]
        };
        let dead: Vec<String> = settings_keys()
            .into_iter()
            .filter(|key| !unread_in_this_build.contains(&key.as_str()))
            .filter(|key| !READS.iter().any(|r| !r.keys.contains(&"*") && r.reads(key)))
            .collect();
        assert!(
            dead.is_empty(),
            "settings keys no command reads (reads::READS): {dead:?}"
        );
    }

    #[test]
    fn a_key_the_command_does_not_read_gets_one_notice_naming_where_it_was_set() {
        let explicit = Explicit::from_iter([
            (
                "eval.seed".to_string(),
                vec!["evomem.toml".to_string(), "EVOMEM_EVAL__SEED".to_string()],
            ),
            ("embedder".to_string(), vec!["EVOMEM_EMBEDDER".to_string()]),
            (
                "llm.roles.mars_plan".to_string(),
                vec!["evomem.toml".to_string()],
            ),
        ]);
        assert_eq!(
            notices(&["embed"], &[], &explicit),
            [
                "notice: setting eval.seed (from evomem.toml, EVOMEM_EVAL__SEED) is not used by this command (evomem embed)",
                "notice: setting llm.roles.mars_plan (from evomem.toml) is not used by this command (evomem embed)",
            ]
        );
        assert!(notices(&["eval"], &[], &explicit).is_empty());
        assert_eq!(notices(&["compare"], &[], &explicit).len(), 3);
        assert!(notices(&["bench", "measure"], &[], &explicit).is_empty());
        let scale = notices(&["bench", "scale"], &[], &explicit);
        assert_eq!(scale.len(), 1, "{scale:?}");
        assert!(scale[0].contains("eval.seed"), "{scale:?}");
    }

    #[cfg(feature = "serve")]
    #[test]
    fn serve_subcommands_read_their_own_keys() {
        let explicit = Explicit::from_iter([
            (
                "serve.bind".to_string(),
                vec!["EVOMEM_SERVE__BIND".to_string()],
            ),
            (
                "serve.data_dir".to_string(),
                vec!["EVOMEM_SERVE__DATA_DIR".to_string()],
            ),
        ]);
        assert!(notices(&["serve"], &[], &explicit).is_empty());
        assert_eq!(
            notices(&["serve", "keys", "add"], &[], &explicit),
            ["notice: setting serve.bind (from EVOMEM_SERVE__BIND) is not used by this command (evomem serve keys add)"]
        );
        assert_eq!(notices(&["mcp"], &[], &explicit).len(), 1);
        assert_eq!(notices(&["serve", "restore"], &[], &explicit).len(), 2);
    }

    fn given(id: &str, key: Option<&str>) -> Given {
        Given {
            id: id.to_string(),
            spelt: format!("--{}", id.replace('_', "-")),
            key: key.map(str::to_string),
        }
    }

    #[test]
    fn a_setting_a_flag_overrides_is_said() {
        let explicit = Explicit::from_iter([
            (
                "eval.seed".to_string(),
                vec!["EVOMEM_EVAL__SEED".to_string()],
            ),
            ("threads".to_string(), vec!["evomem.toml".to_string()]),
        ]);
        let keys = settings_keys();
        let eval = entry(&["eval"]).unwrap();
        assert_eq!(
            flag_key("seed", "Seed [42].", eval, &keys).as_deref(),
            Some("eval.seed")
        );
        assert_eq!(
            flag_key("threads", "", eval, &keys).as_deref(),
            Some("threads")
        );
        assert_eq!(
            flag_key("llm", "", eval, &keys).as_deref(),
            Some("llm.default")
        );
        assert_eq!(flag_key("out", "Output folder.", eval, &keys), None);
        let embed = entry(&["embed"]).unwrap();
        // `evomem embed` reads no `[eval]`: its `--seed`, had it one, is not eval.seed.
        assert_eq!(flag_key("seed", "", embed, &keys), None);
        let flags = [given("seed", Some("eval.seed")), given("out", None)];
        assert_eq!(
            notices(&["eval"], &flags, &explicit),
            ["notice: setting eval.seed (from EVOMEM_EVAL__SEED) is overridden by --seed on this run"]
        );
        assert!(notices(&["eval"], &[], &explicit).is_empty());
    }

    #[cfg(feature = "serve")]
    #[test]
    fn a_flag_can_narrow_what_a_command_reads() {
        let explicit = Explicit::from_iter([
            (
                "serve.data_dir".to_string(),
                vec!["EVOMEM_SERVE__DATA_DIR".to_string()],
            ),
            ("threads".to_string(), vec!["EVOMEM_THREADS".to_string()]),
        ]);
        let keys = settings_keys();
        let mcp = entry(&["mcp"]).unwrap();
        assert_eq!(
            flag_key(
                "data_dir",
                "Open this data folder (`serve.data_dir`).",
                mcp,
                &keys
            )
            .as_deref(),
            Some("serve.data_dir")
        );
        assert!(notices(&["mcp"], &[], &explicit).is_empty());
        let embed = entry(&["embed"]).unwrap();
        let hashing = "The same as `--embedder hashing` (`embedder`).";
        assert_eq!(
            flag_key("hashing", hashing, embed, &keys).as_deref(),
            Some("embedder")
        );
        assert_eq!(
            notices(&["embed"], &[given("hashing", Some("embedder"))], &explicit),
            [
                "notice: setting serve.data_dir (from EVOMEM_SERVE__DATA_DIR) is not used by this command (evomem embed)",
                "notice: setting threads (from EVOMEM_THREADS) is not used by this command (evomem embed)",
            ]
        );
        assert_eq!(notices(&["embed"], &[], &explicit).len(), 1);
        assert_eq!(
            notices(&["mcp"], &[given("url", None)], &explicit),
            ["notice: setting serve.data_dir (from EVOMEM_SERVE__DATA_DIR) is not used by this command (evomem mcp)"]
        );
    }

    #[cfg(not(feature = "serve"))]
    #[test]
    fn a_build_without_serve_says_its_serve_table_once() {
        let explicit = Explicit::from_iter([
            ("serve.bind".to_string(), vec!["evomem.toml".to_string()]),
            ("serve.store".to_string(), vec!["evomem.toml".to_string()]),
        ]);
        let n = notices(&["eval"], &[], &explicit);
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(
            n[0].contains("serve.bind, serve.store") && n[0].contains("`serve` feature"),
            "{n:?}"
        );
    }
}

//! The shipped profiles exist three times in the source tree: `profiles.toml`, which
//! people edit; `profiles.json`, generated from it, which the binary parses (~0.25 ms
//! instead of ~0.85 ms) when a command names a profiled program; and `profiles.names`,
//! the names they answer to, from which the binary knows without parsing anything that a
//! command names none. This keeps the three equal, and regenerates the others when
//! asked:
//! `WARDEN_UPDATE_PROFILES=1 cargo test -p warden-policy --test shipped_profiles`.

// Tests read and write the generated file.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Regenerating says so on stderr.
#![allow(clippy::print_stderr)]

use policy::Profiles;
use policy::profiles::Invocation;

const JSON_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/profiles.json");
const NAMES_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/profiles.names");

#[test]
fn the_shipped_json_is_the_shipped_toml() {
    let from_toml: serde_json::Value = toml::from_str(policy::profiles::SHIPPED).unwrap();
    let generated = serde_json::to_string_pretty(&from_toml).unwrap() + "\n";
    // The names file: what the binary answers "no profile" from without parsing.
    let mut names: Vec<String> = from_toml["program"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["names"].as_array().unwrap().iter())
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names.dedup();
    let names = names.join("\n") + "\n";
    if std::env::var_os("WARDEN_UPDATE_PROFILES").is_some() {
        std::fs::write(JSON_PATH, &generated).unwrap();
        std::fs::write(NAMES_PATH, &names).unwrap();
        eprintln!("wrote {JSON_PATH} and {NAMES_PATH}");
        return;
    }
    assert!(
        names == include_str!("../profiles.names"),
        "{NAMES_PATH} is out of date with profiles.toml: regenerate it with \
         `WARDEN_UPDATE_PROFILES=1 cargo test -p warden-policy --test shipped_profiles` \
         and commit it"
    );
    // And the names the loaded profiles answer to are exactly those.
    assert_eq!(Profiles::shipped().names().join("\n") + "\n", names);
    let shipped_json = include_str!("../profiles.json");
    assert!(
        generated == shipped_json,
        "{JSON_PATH} is out of date with profiles.toml: regenerate it with \
         `WARDEN_UPDATE_PROFILES=1 cargo test -p warden-policy --test shipped_profiles` \
         and commit it"
    );
}

#[test]
fn the_profiles_the_binary_loads_hold_every_example_of_the_toml() {
    // The binary skips the examples when it loads the shipped file (they are checked
    // here, once): every rule's hit and miss examples, run through the loaded profiles.
    let from_toml: serde_json::Value = toml::from_str(policy::profiles::SHIPPED).unwrap();
    let programs = from_toml["program"].as_array().unwrap();
    assert!(programs.len() > 20);
    let loaded = Profiles::shipped();
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let mut examples = 0;
    for program in programs {
        let name = program["names"][0].as_str().unwrap();
        for rule in program["rule"].as_array().into_iter().flatten() {
            let rule_name = rule["name"].as_str().unwrap();
            for (kind, want) in [("hit", true), ("miss", false)] {
                for argv in rule["examples"][kind].as_array().into_iter().flatten() {
                    let argv = strings(argv);
                    let hit = loaded
                        .hits(name, &argv, &Invocation::example())
                        .iter()
                        .any(|h| h.name == rule_name);
                    assert_eq!(
                        hit, want,
                        "{name}: rule {rule_name:?}, {kind} example {argv:?}"
                    );
                    examples += 1;
                }
            }
        }
        let grammar = &program["grammar"]["examples"];
        for (kind, want) in [("accept", true), ("refuse", false)] {
            for argv in grammar[kind].as_array().into_iter().flatten() {
                let argv = strings(argv);
                let hits = loaded.hits(name, &argv, &Invocation::example());
                assert_eq!(
                    hits.is_empty(),
                    want,
                    "{name}: grammar {kind} example {argv:?}: {hits:?}"
                );
                examples += 1;
            }
        }
    }
    assert!(examples > 100, "only {examples} examples");
}

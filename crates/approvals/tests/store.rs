//! The approvals store on the memory provider (logic) and on the real disk (permissions,
//! crash safety, concurrent writers in separate processes).

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use approvals::{ABSENT_HASH, OsRandom, REDACTED, Randomness, Store, StoreConfig, StoreError};
use caps::{Fs, LocalFs, MemoryFs, WriteOptions};
use policy::{Ask, AskFallback, CaseMode, HostCeiling, Security};

const UID: u32 = 1000;

fn config(path: &str) -> StoreConfig {
    StoreConfig {
        path: PathBuf::from(path),
        owner_uid: UID,
        home: PathBuf::from("/home/u"),
        case: CaseMode::Sensitive,
    }
}

fn memory_store() -> (Arc<MemoryFs>, Store) {
    let fs = Arc::new(MemoryFs::with_uid(UID));
    let store = Store::new(fs.clone(), config("/home/u/.warden/exec-approvals.json"));
    (fs, store)
}

fn p(path: &str) -> &Path {
    Path::new(path)
}

struct FixedRandom;
impl Randomness for FixedRandom {
    fn fill(&self, buf: &mut [u8]) -> Result<(), String> {
        buf.fill(0xAB);
        Ok(())
    }
}

#[test]
fn a_missing_file_means_secure_defaults_and_is_not_created_by_reading() {
    let (fs, store) = memory_store();
    let snap = store.load().unwrap();
    assert_eq!(snap.hash, ABSENT_HASH);
    let view = store.host_view(Some("coder"));
    assert_eq!(
        view.ceiling,
        HostCeiling {
            security: Security::Deny,
            ask: Ask::OnMiss,
            ask_fallback: AskFallback::Deny
        }
    );
    assert!(view.error.is_none());
    assert!(fs.file_paths().is_empty());
}

#[test]
fn first_write_creates_a_private_file_in_a_private_directory() {
    let (fs, store) = memory_store();
    store
        .add_patterns("coder", &["/usr/bin/rg".into()], &[], true)
        .unwrap();
    assert_eq!(fs.metadata(p("/home/u/.warden")).unwrap().mode, 0o700);
    assert_eq!(
        fs.metadata(p("/home/u/.warden/exec-approvals.json"))
            .unwrap()
            .mode,
        0o600
    );
    let file = store.load().unwrap().file;
    assert_eq!(file.patterns_for(Some("coder")), vec!["/usr/bin/rg"]);
}

#[test]
fn fields_this_version_does_not_know_survive_a_rewrite() {
    let (fs, store) = memory_store();
    fs.create_dir_all(p("/home/u/.warden"), 0o700).unwrap();
    let original = r#"{
  "version": 1,
  "futureTopLevel": {"keep": [1, 2, 3]},
  "socket": {"path": "~/.warden/exec-approvals.sock", "token": "tok", "socketExtra": true},
  "defaults": {"security": "allowlist", "ask": "on-miss", "askFallback": "deny", "defaultsExtra": "x"},
  "agents": {
    "zeta": {"security": "allowlist", "allowlist": [{"pattern": "/bin/ls", "lastUsedAt": 5, "entryExtra": {"a": 1}}], "agentExtra": 7},
    "alpha": {"allowlist": []}
  }
}"#;
    fs.write(
        p("/home/u/.warden/exec-approvals.json"),
        original.as_bytes(),
        WriteOptions::private(),
    )
    .unwrap();
    store
        .add_patterns("alpha", &["/usr/bin/git".into()], &[], false)
        .unwrap();
    let text = fs
        .read_to_string(p("/home/u/.warden/exec-approvals.json"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["futureTopLevel"]["keep"], serde_json::json!([1, 2, 3]));
    assert_eq!(v["socket"]["socketExtra"], true);
    assert_eq!(v["socket"]["token"], "tok");
    assert_eq!(v["defaults"]["defaultsExtra"], "x");
    assert_eq!(v["agents"]["zeta"]["agentExtra"], 7);
    // Known settings are parsed as settings, not carried along as unknown extras.
    assert_eq!(v["defaults"]["askFallback"], "deny");
    assert_eq!(v["agents"]["zeta"]["security"], "allowlist");
    let file = store.load().unwrap().file;
    assert_eq!(file.defaults.ceilings.security, Some(Security::Allowlist));
    assert_eq!(
        file.defaults.extra.keys().collect::<Vec<_>>(),
        ["defaultsExtra"]
    );
    assert_eq!(
        file.agents["zeta"].ceilings.security,
        Some(Security::Allowlist)
    );
    assert_eq!(
        file.agents["zeta"].extra.keys().collect::<Vec<_>>(),
        ["agentExtra"]
    );
    assert_eq!(v["agents"]["zeta"]["allowlist"][0]["entryExtra"]["a"], 1);
    assert_eq!(
        v["agents"]["alpha"]["allowlist"][0]["pattern"],
        "/usr/bin/git"
    );
    // Agent order is the file's order, not sorted.
    let keys: Vec<&String> = v["agents"].as_object().unwrap().keys().collect();
    assert_eq!(keys, vec!["zeta", "alpha"]);
}

#[test]
fn usage_updates_write_only_when_something_changed() {
    let (_fs, store) = memory_store();
    store
        .add_patterns("coder", &["/usr/bin/rg".into()], &[], true)
        .unwrap();
    let t0 = 1_700_000_000_000;
    assert!(
        store
            .record_use("coder", "/usr/bin/rg", "rg -n x", "/usr/bin/rg", t0)
            .unwrap()
    );
    let h1 = store.load().unwrap().hash;
    assert!(
        !store
            .record_use("coder", "/usr/bin/rg", "rg -n x", "/usr/bin/rg", t0 + 1_000)
            .unwrap()
    );
    assert_eq!(
        store.load().unwrap().hash,
        h1,
        "unchanged use rewrote the file"
    );
    assert!(
        store
            .record_use("coder", "/usr/bin/rg", "rg -n y", "/usr/bin/rg", t0 + 2_000)
            .unwrap()
    );
    assert!(
        store
            .record_use(
                "coder",
                "/usr/bin/rg",
                "rg -n y",
                "/usr/bin/rg",
                t0 + 120_000
            )
            .unwrap()
    );
    let entry = store.load().unwrap().file.agents["coder"].allowlist[0].clone();
    assert_eq!(entry.last_used_at, Some(t0 + 120_000));
    assert_eq!(entry.last_used_command.as_deref(), Some("rg -n y"));
    // An unknown pattern is not an error and writes nothing.
    assert!(
        !store
            .record_use("coder", "/nope", "x", "/nope", t0)
            .unwrap()
    );
}

#[test]
fn invalid_changes_are_specific_errors_and_change_nothing() {
    let (_fs, store) = memory_store();
    store
        .add_patterns("coder", &["/usr/bin/rg".into()], &[], true)
        .unwrap();
    let before = store.load().unwrap();
    let err = store
        .add_patterns(
            "coder",
            &["bin/ls".into(), "/ok".into(), "/usr/bin/[".into()],
            &[],
            false,
        )
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("bin/ls") && msg.contains("/usr/bin/["),
        "{msg}"
    );
    let err = store
        .add_patterns("codr", &["/usr/bin/ls".into()], &["reviewer".into()], false)
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::UnknownAgent { suggestion: Some(s), .. } if s == "coder"),
        "{err}"
    );
    assert!(store.remove_pattern("coder", "/not/there").is_err());
    assert!(store.set_from_text("{not json", &before.hash).is_err());
    assert!(
        store
            .set_from_text(r#"{"version": 2}"#, &before.hash)
            .is_err()
    );
    assert!(
        store
            .set_from_text(
                r#"{"version": 1, "agents": {"a": {"allowlist": [{"pattern": "rel/x"}]}}}"#,
                &before.hash
            )
            .is_err()
    );
    assert_eq!(store.load().unwrap(), before);
}

#[test]
fn set_is_compare_and_swap_and_keeps_a_redacted_token() {
    let (_fs, store) = memory_store();
    let (_, token) = store.ensure_token(&FixedRandom).unwrap();
    let snap = store.load().unwrap();
    let shown = serde_json::to_string_pretty(&snap.file.redacted()).unwrap();
    assert!(shown.contains(REDACTED) && !shown.contains(&token));
    let mut value: serde_json::Value = serde_json::from_str(&shown).unwrap();
    value["defaults"]["security"] = "full".into();
    let edited = serde_json::to_string_pretty(&value).unwrap();
    store.set_from_text(&edited, &snap.hash).unwrap();
    let after = store.load().unwrap();
    assert_eq!(after.file.defaults.ceilings.security, Some(Security::Full));
    assert_eq!(
        after.file.token(),
        Some(token.as_str()),
        "the redaction marker must not replace the token"
    );
    // A second set based on the old hash is refused.
    let err = store.set_from_text(&edited, &snap.hash).unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
}

#[test]
fn the_token_is_created_once_from_the_csprng() {
    let (_fs, store) = memory_store();
    let (path, t1) = store.ensure_token(&OsRandom).unwrap();
    let (_, t2) = store.ensure_token(&OsRandom).unwrap();
    assert_eq!(t1, t2);
    assert!(t1.len() >= 43, "32 random bytes, base64url");
    assert_eq!(path, PathBuf::from("/home/u/.warden/exec-approvals.sock"));
}

#[test]
fn a_corrupt_file_is_kept_aside_never_overwritten_and_denies() {
    let (fs, store) = memory_store();
    fs.create_dir_all(p("/home/u/.warden"), 0o700).unwrap();
    let garbage = b"{\"version\": 1, \"agents\": {\"a\": {\"allowlist\": [";
    fs.write(
        p("/home/u/.warden/exec-approvals.json"),
        garbage,
        WriteOptions::private(),
    )
    .unwrap();
    let view = store.host_view(Some("a"));
    assert_eq!(view.ceiling, HostCeiling::DENY_ALL);
    assert!(view.error.as_deref().unwrap().contains("corrupt"));
    let err = store
        .add_patterns("a", &["/bin/ls".into()], &[], true)
        .unwrap_err();
    let StoreError::Corrupt { kept_at, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(fs.read(&kept_at).unwrap(), garbage);
    assert_eq!(
        fs.read(p("/home/u/.warden/exec-approvals.json")).unwrap(),
        garbage,
        "corrupt file was overwritten"
    );
    // Semantically invalid documents are corrupt too.
    fs.write(
        p("/home/u/.warden/exec-approvals.json"),
        br#"{"version": 1, "defaults": {"security": "sometimes"}}"#,
        WriteOptions::private(),
    )
    .unwrap();
    assert_eq!(store.host_view(None).ceiling, HostCeiling::DENY_ALL);
}

#[test]
fn symlinked_foreign_or_open_files_are_refused() {
    let (fs, store) = memory_store();
    fs.create_dir_all(p("/home/u/.warden"), 0o700).unwrap();
    fs.write(
        p("/tmp-real.json"),
        br#"{"version": 1, "defaults": {"security": "full"}}"#,
        WriteOptions::private(),
    )
    .unwrap();
    fs.symlink("/tmp-real.json", "/home/u/.warden/exec-approvals.json")
        .unwrap();
    let view = store.host_view(None);
    assert_eq!(view.ceiling, HostCeiling::DENY_ALL);
    assert!(view.error.unwrap().contains("symlink"));
    assert!(
        store
            .add_patterns("a", &["/bin/ls".into()], &[], true)
            .is_err()
    );
    fs.remove(p("/home/u/.warden/exec-approvals.json")).unwrap();

    fs.write(
        p("/home/u/.warden/exec-approvals.json"),
        br#"{"version": 1}"#,
        WriteOptions::private(),
    )
    .unwrap();
    fs.set_owner(p("/home/u/.warden/exec-approvals.json"), 0)
        .unwrap();
    assert!(
        store
            .host_view(None)
            .error
            .unwrap()
            .contains("owned by uid 0")
    );
    fs.set_owner(p("/home/u/.warden/exec-approvals.json"), UID)
        .unwrap();
    fs.set_permissions(p("/home/u/.warden/exec-approvals.json"), 0o644)
        .unwrap();
    assert!(store.host_view(None).error.unwrap().contains("chmod 600"));
    fs.set_permissions(p("/home/u/.warden/exec-approvals.json"), 0o600)
        .unwrap();
    fs.set_permissions(p("/home/u/.warden"), 0o777).unwrap();
    assert!(
        store
            .host_view(None)
            .error
            .unwrap()
            .contains("writable by others")
    );
}

#[test]
fn import_merges_an_openclaw_file_without_losing_anything() {
    let (_fs, store) = memory_store();
    store
        .add_patterns("coder", &["/usr/bin/rg".into()], &[], true)
        .unwrap();
    let openclaw = r#"{"version": 1,
        "socket": {"path": "/elsewhere.sock", "token": "theirs"},
        "defaults": {"security": "allowlist", "askFallback": "deny"},
        "agents": {
          "coder": {"security": "full", "allowlist": [{"pattern": "/usr/bin/rg"}, {"pattern": "~/bin/*", "lastUsedAt": 9}]},
          "main": {"ask": "always", "allowlist": [{"pattern": "git"}]}
        }}"#;
    let summary = store.import_openclaw(openclaw).unwrap().value;
    assert_eq!(summary.agents_added, vec!["main"]);
    assert_eq!(summary.patterns_added, 2);
    // Every unset (strict) setting the import filled is named, for new agents too.
    assert_eq!(
        summary.settings_set,
        vec![
            "defaults.security = allowlist",
            "defaults.askFallback = deny",
            "agents.coder.security = full",
            "agents.main.ask = always"
        ]
    );
    let file = store.load().unwrap().file;
    assert_eq!(
        file.patterns_for(Some("coder")),
        vec!["/usr/bin/rg", "~/bin/*"]
    );
    assert_eq!(file.agents["coder"].ceilings.security, Some(Security::Full));
    assert_eq!(file.token(), None, "tokens are never imported");
    assert!(
        store
            .import_openclaw(r#"{"version": 1, "agents": {"x": {"allowlist": [{"pattern": ""}]}}}"#)
            .is_err()
    );
}

/// A file as `openclaw approvals get --json` of OpenClaw 2026.9.6 prints it (two real
/// entries), with hand-added fields at every level.
const OPENCLAW_2026_9_6: &str = r#"{
  "version": 1,
  "socket": {"path": "~/.openclaw/exec-approvals.sock", "token": "theirs"},
  "defaults": {"security": "full", "ask": "off", "askFallback": "allowlist", "autoAllowSkills": true},
  "agents": {
    "*": {
      "security": "allowlist",
      "allowlist": [{"id": "e1", "pattern": "/usr/bin/rg", "lastUsedAt": 1788000000000, "source": "allow-always"}],
      "notes": "every agent"
    },
    "main": {
      "security": "full",
      "askFallback": "full",
      "allowlist": [{"id": "e2", "pattern": "~/bin/deploy", "lastUsedCommand": "deploy --dry"}],
      "color": "blue"
    }
  },
  "ui": {"theme": "dark"}
}"#;

#[test]
fn an_openclaw_file_imports_with_openclaws_meaning_and_nothing_silent() {
    let (_fs, store) = memory_store();
    // This host already knows `main`, more strictly, with a field of its own.
    store
        .set_settings(
            Some("main"),
            approvals::Ceilings {
                security: Some(Security::Allowlist),
                ..Default::default()
            },
            &[],
            true,
        )
        .unwrap();
    store
        .update(None, |f| {
            f.agents["main"].extra.insert("color".into(), "red".into());
            Ok(())
        })
        .unwrap();
    let before = store.load().unwrap();

    // A dry run shows the result and writes nothing.
    let dry = store.import_openclaw_dry_run(OPENCLAW_2026_9_6).unwrap();
    assert!(dry.changes);
    assert_eq!(store.load().unwrap(), before, "a dry run wrote something");

    let u = store.import_openclaw(OPENCLAW_2026_9_6).unwrap();
    let summary = u.value;
    assert_eq!(
        summary, dry.summary,
        "the dry run said what the import does"
    );
    assert_eq!(store.load().unwrap().file, dry.file);
    assert_eq!(summary.agents_added, vec!["*"]);
    assert_eq!(summary.patterns_added, 2);
    // Every loosening change is flagged, `*` (every agent) included.
    for flagged in [
        "defaults.security: deny → full",
        "defaults.ask: on-miss → off",
        "defaults.askFallback: deny → allowlist",
        "agents.*.security: full → allowlist (for every agent)",
        "agents.*: allowlist entry /usr/bin/rg applies to every agent",
        "agents.main.askFallback: allowlist → full",
    ] {
        assert!(
            summary.loosening.iter().any(|l| l == flagged),
            "{flagged:?} not in {:?}",
            summary.loosening
        );
    }
    // What was not taken is said: the stricter agent's value, its own field, the socket.
    for skipped in [
        "agents.main.security: kept allowlist, not the imported full",
        "agents.main.color: kept this host's value, not the imported \"blue\"",
        "socket: the approver socket and token are never imported",
    ] {
        assert!(
            summary.skipped.iter().any(|l| l == skipped),
            "{skipped:?} not in {:?}",
            summary.skipped
        );
    }
    // Unknown fields at every level are kept.
    let file = store.load().unwrap().file;
    assert_eq!(file.defaults.extra["autoAllowSkills"], true);
    assert_eq!(file.extra["ui"]["theme"], "dark");
    assert_eq!(file.agents["*"].extra["notes"], "every agent");
    assert_eq!(
        file.agents["*"].allowlist[0].extra["source"],
        "allow-always"
    );
    assert_eq!(file.agents["main"].extra["color"], "red");
    for kept in ["defaults.autoAllowSkills", "ui", "agents.*.notes"] {
        assert!(summary.fields_kept.iter().any(|k| k == kept), "{kept}");
    }
    assert_eq!(file.token(), None);

    // `*` is every agent: its entries and settings reach an agent it never named.
    let view = store.host_view(Some("reviewer"));
    assert_eq!(view.ceiling.security, Security::Allowlist);
    assert_eq!(view.allowlist.len(), 1);
    // An agent's own values win over `*`'s; both allowlists apply.
    let main = store.host_view(Some("main"));
    assert_eq!(main.ceiling.security, Security::Allowlist);
    assert_eq!(main.ceiling.ask_fallback, AskFallback::Full);
    assert_eq!(
        file.patterns_for(Some("main")),
        vec!["~/bin/deploy", "/usr/bin/rg"]
    );
    // Importing the same file again changes nothing.
    assert!(!store.import_openclaw(OPENCLAW_2026_9_6).unwrap().written);
}

#[test]
fn argument_rules_are_stored_checked_and_matched_per_rule() {
    let (_fs, store) = memory_store();
    let status = policy::RuleSpec {
        args: Some(vec!["status".into()]),
        ..policy::RuleSpec::program("/usr/bin/git")
    };
    let log = policy::RuleSpec {
        args: Some(vec!["log".into(), "*".into()]),
        args_match: policy::ArgsMatch::Exact,
        ..policy::RuleSpec::program("/usr/bin/git")
    };
    let added = store
        .add_rules("coder", &[status.clone(), log.clone()], &[], true)
        .unwrap()
        .value;
    assert_eq!(
        added,
        vec!["/usr/bin/git status …", "/usr/bin/git log '*' (exactly)"]
    );
    // The same rule again is no change; the same pattern with other rules is another.
    assert!(
        !store
            .add_rules("coder", std::slice::from_ref(&status), &[], true)
            .unwrap()
            .written
    );
    let file = store.load().unwrap().file;
    assert_eq!(file.agents["coder"].allowlist.len(), 2);
    // On disk: `pattern` as in version 1, the new fields beside it.
    let json = serde_json::to_value(&file).unwrap();
    let entry = &json["agents"]["coder"]["allowlist"][1];
    assert_eq!(entry["pattern"], "/usr/bin/git");
    assert_eq!(entry["args"], serde_json::json!(["log", "*"]));
    assert_eq!(entry["argsMatch"], "exact");
    // A rule whose examples do not hold is refused, and nothing changes.
    let before = store.load().unwrap();
    let wrong = policy::RuleSpec {
        examples: policy::Examples {
            matches: vec![vec!["git".into(), "push".into()]],
            not_matches: vec![],
            ..Default::default()
        },
        ..status.clone()
    };
    let err = store.add_rules("coder", &[wrong], &[], true).unwrap_err();
    assert!(err.to_string().contains("must match but does not"), "{err}");
    assert_eq!(store.load().unwrap(), before);
    // Usage is recorded on the rule that matched, not on another with the same pattern.
    assert!(
        store
            .record_rule_use("coder", &log, "git log x", "/usr/bin/git", 5)
            .unwrap()
    );
    let file = store.load().unwrap().file;
    assert_eq!(file.agents["coder"].allowlist[0].last_used_at, None);
    assert_eq!(file.agents["coder"].allowlist[1].last_used_at, Some(5));
    // Fields a later version may add inside an entry's new fields are kept too.
    store
        .update(None, |f| {
            let e = &mut f.agents.get_mut("coder").unwrap().allowlist[1];
            e.examples = Some(
                serde_json::from_str(r#"{"match": [["git", "log", "x"]], "since": "v9"}"#).unwrap(),
            );
            Ok(())
        })
        .unwrap();
    store
        .add_patterns("coder", &["/usr/bin/ls".into()], &[], true)
        .unwrap();
    let json = serde_json::to_value(store.load().unwrap().file).unwrap();
    assert_eq!(
        json["agents"]["coder"]["allowlist"][1]["examples"]["since"],
        "v9"
    );
    store.remove_pattern("coder", "/usr/bin/ls").unwrap();
    // Removing one rule leaves the other.
    store.remove_rule("coder", &status).unwrap();
    let left = store.load().unwrap().file.rules_for(Some("coder"));
    assert!(left.len() == 1 && left[0].same_rule(&log), "{left:?}");
    // An operator's profiles file that cannot be used denies everything, saying why.
    let broken = store.clone().with_profiles(Err(
        "/h/profiles.toml: bad; this host denies every command".into(),
    ));
    let view = broken.host_view(Some("coder"));
    assert_eq!(view.ceiling, HostCeiling::DENY_ALL);
    assert!(view.error.unwrap().contains("profiles.toml"));
}

// ---- real disk, real processes ----

/// When run as a helper (`STORE_HELPER=add:<path>:<prefix>:<count>`), add `count`
/// patterns one update at a time and exit. Otherwise this test does nothing.
#[test]
fn helper_writer() {
    let Ok(spec) = std::env::var("STORE_HELPER") else {
        return;
    };
    let parts: Vec<&str> = spec.splitn(4, ':').collect();
    let (path, prefix, count) = (parts[1], parts[2], parts[3].parse::<usize>().unwrap());
    let uid = nix::unistd::getuid().as_raw();
    let store = Store::new(
        Arc::new(LocalFs::new("/").unwrap()),
        StoreConfig {
            path: PathBuf::from(path),
            owner_uid: uid,
            home: PathBuf::from("/root"),
            case: CaseMode::Sensitive,
        },
    );
    for i in 0..count {
        store
            .add_patterns("agent", &[format!("/opt/{prefix}/{i}")], &[], true)
            .unwrap();
    }
}

fn spawn_helper(path: &Path, prefix: &str, count: usize) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "STORE_HELPER",
            format!("add:{}:{prefix}:{count}", path.display()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn real_store(dir: &Path) -> (Store, PathBuf) {
    let path = dir.join("state/exec-approvals.json");
    let uid = nix::unistd::getuid().as_raw();
    let store = Store::new(
        Arc::new(LocalFs::new("/").unwrap()),
        StoreConfig {
            path: path.clone(),
            owner_uid: uid,
            home: PathBuf::from("/root"),
            case: CaseMode::Sensitive,
        },
    );
    (store, path)
}

fn fast_tempdir() -> tempfile::TempDir {
    // tmpfs keeps the fsync-heavy concurrency test quick; semantics are the same.
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

#[test]
fn real_files_get_0600_in_a_0700_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, path) = real_store(tmp.path());
    store.ensure_token(&OsRandom).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
}

#[test]
fn two_processes_adding_500_entries_each_lose_nothing() {
    let tmp = fast_tempdir();
    let (store, path) = real_store(tmp.path());
    let mut a = spawn_helper(&path, "a", 500);
    let mut b = spawn_helper(&path, "b", 500);
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let patterns = store.load().unwrap().file.patterns_for(Some("agent"));
    assert_eq!(patterns.len(), 1000);
}

#[test]
fn kill_9_at_random_points_leaves_the_old_or_the_new_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, path) = real_store(tmp.path());
    let mut seen = 0usize;
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    for round in 0..150 {
        let mut child = spawn_helper(&path, &format!("r{round}"), 1_000_000);
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        std::thread::sleep(Duration::from_micros(2_000 + state % 25_000));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        child.wait().unwrap();
        let snapshot = store
            .load()
            .unwrap_or_else(|e| panic!("round {round}: torn or corrupt file: {e}"));
        let count = snapshot.file.patterns_for(Some("agent")).len();
        assert!(
            count >= seen,
            "round {round}: entries went from {seen} to {count}"
        );
        seen = count;
    }
    assert!(
        seen > 0,
        "the writers never committed anything; the test exercised nothing"
    );
}

#[test]
fn settings_change_defaults_or_one_agent_and_refuse_unknown_agents() {
    let (_fs, store) = memory_store();
    let change = approvals::Ceilings {
        security: Some(Security::Allowlist),
        ..Default::default()
    };
    store.set_settings(None, change, &[], false).unwrap();
    assert_eq!(
        store.load().unwrap().file.defaults.ceilings.security,
        Some(Security::Allowlist)
    );
    let err = store
        .set_settings(Some("ghost"), change, &["main".into()], false)
        .unwrap_err();
    assert!(matches!(err, StoreError::UnknownAgent { .. }), "{err}");
    store
        .set_settings(Some("main"), change, &["main".into()], false)
        .unwrap();
    let file = store.load().unwrap().file;
    assert_eq!(
        file.agents["main"].ceilings.security,
        Some(Security::Allowlist)
    );
    assert_eq!(
        file.agents["main"].ceilings.ask, None,
        "untouched values stay unset"
    );
    assert!(
        store
            .set_settings(Some("bad\nid"), change, &[], true)
            .is_err()
    );
}

#[test]
fn set_accepts_what_get_prints() {
    let (_fs, store) = memory_store();
    store
        .add_patterns("coder", &["/usr/bin/rg".into()], &[], true)
        .unwrap();
    let snapshot = store.load().unwrap();
    let printed = format!(
        "# /home/u/.warden/exec-approvals.json\n# hash: {}\n{}\n",
        snapshot.hash,
        serde_json::to_string_pretty(&snapshot.file.redacted()).unwrap()
    );
    let edited = printed.replace("/usr/bin/rg", "/usr/bin/fd");
    store.set_from_text(&edited, &snapshot.hash).unwrap();
    assert_eq!(
        store.load().unwrap().file.patterns_for(Some("coder")),
        vec!["/usr/bin/fd"]
    );
}

#[test]
fn based_edits_apply_only_to_the_version_they_were_based_on() {
    let (_fs, store) = memory_store();
    let known = ["coder".to_owned()];
    let base = store.load().unwrap().hash;
    let added = store
        .add_patterns_based(Some(&base), "coder", &["/usr/bin/rg".into()], &known, false)
        .unwrap();
    assert!(added.written);
    // Another writer changes the file; an edit based on the old version is refused and
    // changes nothing, whatever it was.
    let stale = added.hash.clone();
    store
        .add_patterns("coder", &["/usr/bin/git".into()], &known, false)
        .unwrap();
    let now = store.load().unwrap();
    let edits: Vec<Result<(), StoreError>> = vec![
        store
            .add_patterns_based(Some(&stale), "coder", &["/bin/ls".into()], &known, false)
            .map(drop),
        store
            .remove_pattern_based(Some(&stale), "coder", "/usr/bin/rg")
            .map(drop),
        store
            .set_ceilings_based(
                Some(&stale),
                Some("coder"),
                approvals::Ceilings {
                    security: Some(Security::Full),
                    ..Default::default()
                },
                &known,
            )
            .map(drop),
        store.create_agent_based(Some(&stale), "ops").map(drop),
    ];
    for edit in edits {
        assert!(matches!(edit, Err(StoreError::Conflict { .. })), "{edit:?}");
    }
    assert_eq!(store.load().unwrap(), now, "a refused edit wrote something");
    // On the current version they apply; set_ceilings unsets what it leaves None.
    let h = store
        .set_ceilings_based(
            Some(&now.hash),
            Some("coder"),
            approvals::Ceilings {
                security: Some(Security::Allowlist),
                ask: Some(Ask::Always),
                ask_fallback: None,
            },
            &known,
        )
        .unwrap()
        .hash;
    let h = store
        .set_ceilings_based(
            Some(&h),
            Some("coder"),
            approvals::Ceilings {
                ask: Some(Ask::Always),
                ..Default::default()
            },
            &known,
        )
        .unwrap()
        .hash;
    let file = store.load().unwrap().file;
    assert_eq!(file.agents["coder"].ceilings.security, None);
    assert_eq!(file.agents["coder"].ceilings.ask, Some(Ask::Always));
    assert_eq!(file.agents["coder"].allowlist.len(), 2, "entries kept");
    let h = store
        .remove_pattern_based(Some(&h), "coder", "/usr/bin/rg")
        .unwrap()
        .hash;
    // New agents: created empty once; unknown ones are refused by the settings edit;
    // an existing one is never replaced.
    let err = store
        .set_ceilings_based(Some(&h), Some("ghost"), Default::default(), &known)
        .unwrap_err();
    assert!(matches!(err, StoreError::UnknownAgent { .. }), "{err}");
    let h = store.create_agent_based(Some(&h), "ops").unwrap().hash;
    assert!(store.load().unwrap().file.agents.contains_key("ops"));
    let err = store.create_agent_based(Some(&h), "coder").unwrap_err();
    assert!(err.to_string().contains("already in the file"), "{err}");
    let err = store.create_agent_based(Some(&h), "a\nb").unwrap_err();
    assert!(err.to_string().contains("invalid agent id"), "{err}");
    // A new agent gets the id a gateway credential could have, whichever way it is made.
    let err = store.create_agent_based(Some(&h), "bad id!").unwrap_err();
    assert!(err.to_string().contains("letters, digits"), "{err}");
    let err = store
        .add_patterns_based(Some(&h), "bad id!", &["/usr/bin/ls".into()], &known, true)
        .unwrap_err();
    assert!(err.to_string().contains("letters, digits"), "{err}");
    assert!(!store.load().unwrap().file.agents.contains_key("bad id!"));
}

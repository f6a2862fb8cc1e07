//! What the builder is asked to build: the subset of bubblewrap's command line that
//! [`crate::namespace::NamespaceSandbox::command_line`] writes, parsed strictly. One command line serves
//! both engines, so the mount plan, the descriptors and the helper's arguments cannot
//! drift apart between them; anything outside the subset is refused (fail closed), never
//! skipped.

use std::path::{Path, PathBuf};

use crate::SandboxError;

/// One mount operation, in command-line order (parents first, as the plan orders them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `--ro-bind / /`: the host's root, read-only, as the new root.
    RootReadOnly,
    /// `--dev P`: a minimal `/dev`.
    Dev(PathBuf),
    /// `--proc P`: a fresh `/proc` of the new pid namespace.
    Proc(PathBuf),
    /// `--tmpfs P`: an empty, writable tmpfs.
    Tmpfs(PathBuf),
    /// `--remount-ro P`: the mount at `P` made read-only.
    RemountReadOnly(PathBuf),
    /// `--bind SRC DEST` / `--ro-bind SRC DEST`: `SRC` as the host sees it.
    Bind {
        /// The host's file or directory.
        source: PathBuf,
        /// Where it appears inside.
        dest: PathBuf,
        /// `--bind` (else `--ro-bind`).
        writable: bool,
    },
    /// `--bind-fd N DEST` / `--ro-bind-fd N DEST`: the directory open as descriptor `N`.
    BindFd {
        /// The descriptor (opened and checked by Warden before the launch).
        fd: i32,
        /// Where it appears inside.
        dest: PathBuf,
        /// `--bind-fd` (else `--ro-bind-fd`).
        writable: bool,
    },
    /// `--ro-bind-data N DEST`: a read-only file at `DEST` holding what descriptor `N`
    /// reads (at most [`MAX_DATA`] bytes).
    BindData {
        /// The descriptor to read.
        fd: i32,
        /// Where the file appears inside.
        dest: PathBuf,
    },
}

/// The most a `--ro-bind-data` descriptor may hold (Warden's are a few lines).
pub const MAX_DATA: usize = 64 * 1024;

/// The whole request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    /// `--die-with-parent`.
    pub die_with_parent: bool,
    /// `--new-session`.
    pub new_session: bool,
    /// `--unshare-net` (user, pid, ipc and uts namespaces are always new: the builder
    /// refuses a command line that does not ask for them).
    pub unshare_net: bool,
    /// `--add-seccomp-fd N`, in order.
    pub seccomp_fds: Vec<i32>,
    /// The mounts, in order.
    pub ops: Vec<Op>,
    /// `--chdir P`.
    pub chdir: Option<PathBuf>,
    /// `--json-status-fd N`: where the command's exit status is reported, as bubblewrap
    /// reports it (`{ "exit-code": N }`), before the sandbox is torn down.
    pub status_fd: Option<i32>,
    /// What follows `--`: the program and its arguments.
    pub command: Vec<String>,
}

/// Namespaces every sandbox gets; the builder makes them whether asked or not, and
/// refuses a command line that leaves one out (it was not written for this builder).
const ALWAYS: &[&str] = &[
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
];

/// Parse `args` (bubblewrap's arguments, without the program).
pub fn parse(args: &[String]) -> Result<Spec, SandboxError> {
    let mut spec = Spec::default();
    let mut seen_always = vec![false; ALWAYS.len()];
    let mut i = 0;
    let value = |i: usize, n: usize| -> Result<&[String], SandboxError> {
        args.get(i + 1..i + 1 + n)
            .ok_or_else(|| SandboxError::Spec(format!("{} needs {n} argument(s)", args[i])))
    };
    let path = |s: &String| -> Result<PathBuf, SandboxError> {
        let p = PathBuf::from(s);
        if !p.is_absolute() {
            return Err(SandboxError::Spec(format!(
                "mount path {s:?} is not absolute"
            )));
        }
        Ok(p)
    };
    let fd = |s: &String| -> Result<i32, SandboxError> {
        s.parse::<i32>().ok().filter(|n| *n >= 3).ok_or_else(|| {
            SandboxError::Spec(format!("descriptor {s:?} is not a number of 3 or more"))
        })
    };
    while i < args.len() {
        let arg = args[i].as_str();
        let taken = match arg {
            "--" => {
                spec.command = args[i + 1..].to_vec();
                break;
            }
            "--die-with-parent" => {
                spec.die_with_parent = true;
                0
            }
            "--new-session" => {
                spec.new_session = true;
                0
            }
            "--unshare-net" => {
                spec.unshare_net = true;
                0
            }
            // Capabilities are always all dropped before the command runs.
            "--cap-drop" => {
                let v = value(i, 1)?;
                if v[0] != "ALL" {
                    return Err(SandboxError::Spec(format!(
                        "--cap-drop {} is not supported (only ALL)",
                        v[0]
                    )));
                }
                1
            }
            "--add-seccomp-fd" => {
                spec.seccomp_fds.push(fd(&value(i, 1)?[0])?);
                1
            }
            "--dev" => {
                spec.ops.push(Op::Dev(path(&value(i, 1)?[0])?));
                1
            }
            "--proc" => {
                spec.ops.push(Op::Proc(path(&value(i, 1)?[0])?));
                1
            }
            "--tmpfs" => {
                spec.ops.push(Op::Tmpfs(path(&value(i, 1)?[0])?));
                1
            }
            "--remount-ro" => {
                spec.ops.push(Op::RemountReadOnly(path(&value(i, 1)?[0])?));
                1
            }
            "--chdir" => {
                spec.chdir = Some(path(&value(i, 1)?[0])?);
                1
            }
            "--json-status-fd" => {
                spec.status_fd = Some(fd(&value(i, 1)?[0])?);
                1
            }
            "--bind" | "--ro-bind" => {
                let v = value(i, 2)?;
                let (source, dest) = (path(&v[0])?, path(&v[1])?);
                let writable = arg == "--bind";
                if source == Path::new("/") && dest == source {
                    if writable {
                        return Err(SandboxError::Spec(
                            "a writable root is not supported".into(),
                        ));
                    }
                    spec.ops.push(Op::RootReadOnly);
                } else {
                    spec.ops.push(Op::Bind {
                        source,
                        dest,
                        writable,
                    });
                }
                2
            }
            "--bind-fd" | "--ro-bind-fd" => {
                let v = value(i, 2)?;
                spec.ops.push(Op::BindFd {
                    fd: fd(&v[0])?,
                    dest: path(&v[1])?,
                    writable: arg == "--bind-fd",
                });
                2
            }
            "--ro-bind-data" => {
                let v = value(i, 2)?;
                spec.ops.push(Op::BindData {
                    fd: fd(&v[0])?,
                    dest: path(&v[1])?,
                });
                2
            }
            other => match ALWAYS.iter().position(|a| *a == other) {
                Some(n) => {
                    seen_always[n] = true;
                    0
                }
                None => {
                    return Err(SandboxError::Spec(format!(
                        "unsupported sandbox option {other:?}"
                    )));
                }
            },
        };
        i += 1 + taken;
    }
    if let Some(n) = seen_always.iter().position(|seen| !seen) {
        return Err(SandboxError::Spec(format!(
            "the command line does not ask for {}",
            ALWAYS[n]
        )));
    }
    if spec.ops.first() != Some(&Op::RootReadOnly) {
        return Err(SandboxError::Spec(
            "the first mount must be the read-only root (--ro-bind / /)".into(),
        ));
    }
    if spec.ops[1..].contains(&Op::RootReadOnly) {
        return Err(SandboxError::Spec(
            "the root can only be mounted once".into(),
        ));
    }
    if spec.command.is_empty() {
        return Err(SandboxError::Spec("no command after --".into()));
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    const BASE: &str = "--die-with-parent --new-session --unshare-user --unshare-pid \
                        --unshare-ipc --unshare-uts";

    #[test]
    fn a_full_command_line_parses_in_order() {
        let spec = parse(&strings(&format!(
            "{BASE} --unshare-net --cap-drop ALL --ro-bind / / --dev /dev --proc /proc \
             --add-seccomp-fd 3 --add-seccomp-fd 4 --tmpfs /home --bind-fd 5 /home/u/ws \
             --tmpfs /home/u/ws/.warden --remount-ro /home/u/ws/.warden \
             --ro-bind /dev/null /etc/shadow --ro-bind-data 7 /etc/resolv.conf \
             --chdir /home/u/ws --json-status-fd 6 \
             -- /h __sandbox-helper x"
        )))
        .unwrap();
        assert_eq!(spec.status_fd, Some(6));
        assert!(spec.die_with_parent && spec.new_session && spec.unshare_net);
        assert_eq!(spec.seccomp_fds, vec![3, 4]);
        assert_eq!(
            spec.ops,
            vec![
                Op::RootReadOnly,
                Op::Dev("/dev".into()),
                Op::Proc("/proc".into()),
                Op::Tmpfs("/home".into()),
                Op::BindFd {
                    fd: 5,
                    dest: "/home/u/ws".into(),
                    writable: true
                },
                Op::Tmpfs("/home/u/ws/.warden".into()),
                Op::RemountReadOnly("/home/u/ws/.warden".into()),
                Op::Bind {
                    source: "/dev/null".into(),
                    dest: "/etc/shadow".into(),
                    writable: false
                },
                Op::BindData {
                    fd: 7,
                    dest: "/etc/resolv.conf".into(),
                },
            ]
        );
        assert_eq!(spec.chdir, Some("/home/u/ws".into()));
        assert_eq!(spec.command, strings("/h __sandbox-helper x"));
    }

    #[test]
    fn anything_outside_the_subset_is_refused() {
        for (extra, why) in [
            ("--share-net", "unsupported sandbox option"),
            ("--cap-add CAP_SYS_ADMIN", "unsupported sandbox option"),
            ("--cap-drop CAP_NET_RAW", "only ALL"),
            ("--tmpfs relative", "not absolute"),
            ("--bind-fd 2 /x", "3 or more"),
            ("--ro-bind-data 1 /etc/resolv.conf", "3 or more"),
            ("--ro-bind-data 5 etc/resolv.conf", "not absolute"),
            ("--json-status-fd 1", "3 or more"),
            ("--bind / /", "writable root"),
            ("--ro-bind / /", "only be mounted once"),
            // A value is taken as given: `--` after `--tmpfs` is its (relative) path.
            ("--tmpfs", "\"--\" is not absolute"),
        ] {
            let err = parse(&strings(&format!(
                "{BASE} --ro-bind / / {extra} -- /bin/true"
            )))
            .unwrap_err()
            .to_string();
            assert!(err.contains(why), "{extra}: {err}");
        }
    }

    #[test]
    fn every_namespace_root_and_command_must_be_asked_for() {
        let without_pid = BASE.replace("--unshare-pid", "");
        let err = parse(&strings(&format!(
            "{without_pid} --ro-bind / / -- /bin/true"
        )))
        .unwrap_err()
        .to_string();
        assert!(err.contains("--unshare-pid"), "{err}");
        let err = parse(&strings(&format!("{BASE} --tmpfs /tmp -- /bin/true")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("read-only root"), "{err}");
        let err = parse(&strings(&format!("{BASE} --ro-bind / / --")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no command"), "{err}");
        let err = parse(&strings(&format!("{BASE} --ro-bind / / --tmpfs")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs 1 argument"), "{err}");
    }
}

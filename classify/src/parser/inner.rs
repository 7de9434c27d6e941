//! What an argument list runs: the one model of an inner command. A wrapper (`env`, `sudo`,
//! `find -exec`, `su -c`, …) and a tool that runs commands from its arguments (`awk
//! 'BEGIN{system("git")}'`, `sed '1e git'`, `tar --to-command=git`, …) both report what they
//! would run as [`Inner`] items, and the walk classifies each like any other command. A leaf.

/// A command an argument list runs, as far as the classifier can see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inner {
    /// The inner command's name is the argument at this index; its arguments follow.
    At(usize),
    /// `env -S 'STRING'`: env's own argument list after splitting the string in place, to be
    /// read by env again (`env -S 'env git'`, `env -S '-i git'`).
    Env(Vec<Option<String>>),
    /// The arguments in this range, joined with spaces, run by a shell (`watch git status`).
    Joined(usize, usize),
    /// Text run with `/bin/sh -c` (a new shell: the script's functions are not visible):
    /// `su -c TEXT`, awk's `system()`.
    Shell(String),
    /// Code the current shell evaluates (a `trap` action, an alias, an array subscript): the
    /// script's functions are visible to it.
    SameShell(String),
    /// With no command, an interactive shell starts and reads stdin (`chroot DIR`, `su`,
    /// `unshare`, `script`).
    StdinShell,
    /// A program started directly by name or path, without a shell (`su -s /usr/bin/git`,
    /// `sort --compress-program=PROG`).
    Program(String),
    /// A command only known at run time; `seen` is the literal text around it that may name one.
    Dynamic { detail: String, seen: Seen },
    /// Program text read from a file, or native code loaded (`su root x.sh`, `awk -f x.awk`,
    /// `.read x.sql`, `gawk --load`, `enable -f`): described for the `opaque-script` reason.
    Opaque(String),
}

/// The literal text of a run-time command: a denied command named there refuses, since
/// escalating would run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The visible pieces of the command itself (`"git add " $1`).
    Pieces(Vec<String>),
    /// The arguments of the wrapper: any of them may be the command (`env "$X" git`).
    Arguments,
}

/// The detail of a wrapper whose command is only known at run time.
pub const WRAPPED_AT_RUN_TIME: &str = "the wrapped command is only known at run time";

impl Inner {
    /// A tool's command only known at run time, with no visible pieces.
    pub fn dynamic(detail: impl Into<String>) -> Inner {
        Inner::Dynamic {
            detail: detail.into(),
            seen: Seen::Pieces(Vec::new()),
        }
    }

    /// A wrapper whose command (or an argument that decides it) is only known at run time.
    pub fn wrapped_at_run_time() -> Inner {
        Inner::Dynamic {
            detail: WRAPPED_AT_RUN_TIME.into(),
            seen: Seen::Arguments,
        }
    }
}

//! What a tool reader reports: the [`Hidden`] commands, and the bound on how many one program
//! may add. A leaf shared by the readers and mod.rs.

/// A command a tool would run, as far as the classifier can see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hidden {
    /// Text the tool runs with `/bin/sh -c` (a new shell: the script's functions are not visible).
    Shell(String),
    /// Code the current shell evaluates (a `trap` action, an alias, an array subscript): the
    /// script's functions are visible to it.
    SameShell(String),
    /// A program the tool starts directly by name or path, without a shell.
    Program(String),
    /// A command only known at run time. `fragments` are the literal pieces of it that are visible
    /// (`"git add " $1`): a denied command named in them refuses, since escalating would run it.
    Dynamic {
        detail: String,
        fragments: Vec<String>,
    },
    /// Program text read from a file, or native code loaded (`awk -f x.awk`, `.read x.sql`,
    /// `gawk --load`, `enable -f`): described for the `opaque-script` reason.
    Opaque(String),
}

impl Hidden {
    pub(super) fn dynamic(detail: impl Into<String>) -> Hidden {
        Hidden::Dynamic {
            detail: detail.into(),
            fragments: Vec::new(),
        }
    }
}

/// Commands followed in one tool's program; past this, the rest of it is one run-time command.
/// Bounds the work on programs made of thousands of `system(` calls.
pub(super) const MAX_FOUND: usize = 64;

pub(super) fn too_many(out: &mut Vec<Hidden>) -> bool {
    if out.len() < MAX_FOUND {
        return false;
    }
    out.push(Hidden::dynamic(format!(
        "more than {MAX_FOUND} commands in one program"
    )));
    true
}

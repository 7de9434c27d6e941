//! The tool directory: one symlink per Tier-0 command of the capability matrix that exists on
//! this host (gated ones only when their toggle is on). PATH points here; landlock grants
//! EXECUTE only to the symlinks' real targets and what the kernel needs to start them.

use super::{elf, SandboxError};
use kube_harness_classify::{matrix, RuntimeToggles};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// System directories searched for tools, in PATH order. The caller's own PATH is never used:
/// it may hold user or project directories. In these directories only the tools themselves can
/// be read (landlock_rules.rs), so no other program there can be mapped by the dynamic loader.
pub const SEARCH: &[&str] = &[
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
    "/usr/local/sbin",
    "/usr/sbin",
    "/sbin",
];

pub struct Toolset {
    /// Command names linked into the tool directory, sorted.
    pub names: Vec<String>,
    /// Canonical files that must be executable: tool targets, bash, their interpreters.
    pub executables: BTreeSet<PathBuf>,
    /// Canonical path of bash.
    pub bash: PathBuf,
}

/// The names of `denied` that change a tool directory: those the capability matrix links on
/// Tier-0 under some toggle. Deny lists with the same such names build the same sandbox (a denied
/// name that is no Tier-0 tool, such as `shutdown`, is refused by classification alone). Without
/// the matrix, the whole list.
pub fn denied_tools(denied: &[String]) -> BTreeSet<String> {
    let Some(m) = matrix::get(None) else {
        return denied.iter().cloned().collect();
    };
    let t = &m.doc.tier0;
    denied
        .iter()
        .filter(|d| {
            [&t.always, &t.network, &t.python, &t.javascript]
                .iter()
                .any(|names| names.contains(d))
        })
        .cloned()
        .collect()
}

/// Creates `dir` with the symlinks.
pub fn build(
    dir: &Path,
    toggles: RuntimeToggles,
    denied: &[String],
) -> Result<Toolset, SandboxError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        SandboxError::io(format!("creating the tool directory {}", dir.display()), e)
    })?;
    let m = matrix::get(None).ok_or_else(|| {
        SandboxError::io(
            "loading the capability matrix",
            std::io::ErrorKind::NotFound.into(),
        )
    })?;
    let t = &m.doc.tier0;
    let mut wanted: Vec<&String> = t.always.iter().collect();
    // Interpreters of toggled-off groups: a tool that needs one (yq is often a python3 script)
    // would make it executable again, so such tools are left out too.
    let mut forbidden = BTreeSet::new();
    for (on, names) in [
        (toggles.network, &t.network),
        (toggles.python, &t.python),
        (toggles.javascript, &t.javascript),
    ] {
        if on {
            wanted.extend(names);
        } else {
            forbidden.extend(names.iter().filter_map(|n| locate(n)));
        }
    }

    let bash = ["/usr/bin/bash", "/bin/bash"]
        .iter()
        .find_map(|p| std::fs::canonicalize(p).ok().filter(|c| is_executable(c)))
        .ok_or(SandboxError::NoBash)?;
    // A denied program that other tools run as their `#!` interpreter (`sh` or `dash`: which,
    // egrep, zcat; `python3`: yq) takes those tools out too, and is not executable itself: else
    // the deny would hold for its name only, and awk `system()`, sqlite3 `.shell` or a python
    // script would run it all the same. Bash itself stays (it runs every command).
    for d in denied {
        let name = Path::new(d)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("");
        if let Some(target) = locate(name).filter(|t| *t != bash) {
            forbidden.insert(target);
        }
    }

    let mut names = Vec::new();
    let mut executables = BTreeSet::new();
    add_with_interpreters(&bash, &mut executables);
    for name in wanted {
        if name.contains('/') || name == "." || name == ".." || denied.contains(name) {
            continue;
        }
        let Some(target) = locate(name) else {
            continue;
        };
        let mut chain = BTreeSet::new();
        add_with_interpreters(&target, &mut chain);
        if !chain.is_disjoint(&forbidden) {
            continue;
        }
        let link = dir.join(name);
        std::os::unix::fs::symlink(&target, &link)
            .map_err(|e| SandboxError::io(format!("linking {}", link.display()), e))?;
        executables.extend(chain);
        names.push(name.clone());
    }
    names.sort();
    Ok(Toolset {
        names,
        executables,
        bash,
    })
}

/// Directories whose files a tool may map as code, besides its own file: the tool directories,
/// the shared-library directories the dynamic loader searches (`/etc/ld.so.conf`, the multiarch
/// and lib64 directories, the loader's own), and what some tools load on their own (stdbuf's
/// preload library, Python's extension modules). In a namespace everything else under the
/// system directories is mounted `noexec` (namespace.rs). Canonical, existing, sorted parents
/// first.
pub fn code_dirs(toolset: &Toolset) -> Vec<PathBuf> {
    let mut dirs = BTreeSet::new();
    let mut add = |p: PathBuf| {
        if let Ok(c) = std::fs::canonicalize(&p) {
            if c.is_dir() && c != Path::new("/") && c != Path::new("/usr") {
                dirs.insert(c);
            }
        }
    };
    for d in SEARCH {
        add(PathBuf::from(d));
    }
    let multiarch = format!("{}-linux-gnu", std::env::consts::ARCH);
    for d in ["/lib64", "/usr/lib64", "/usr/local/lib"] {
        add(PathBuf::from(d));
    }
    for d in ["/lib", "/usr/lib", "/usr/local/lib"] {
        add(Path::new(d).join(&multiarch));
        // Distributions without multiarch keep libc (and everything else) right in /usr/lib.
        if Path::new(d).join("libc.so.6").exists() {
            add(PathBuf::from(d));
        }
    }
    for d in ld_so_conf(Path::new("/etc/ld.so.conf"), 0) {
        add(d);
    }
    for exe in &toolset.executables {
        // The loader (and any other shared object among the executables).
        if exe.to_string_lossy().contains(".so") {
            if let Some(parent) = exe.parent() {
                add(parent.to_path_buf());
            }
        }
    }
    let has = |name: &str| toolset.names.iter().any(|n| n == name);
    if has("stdbuf") {
        for d in ["/usr/libexec/coreutils", "/usr/lib/coreutils"] {
            add(PathBuf::from(d));
        }
    }
    if has("python3") || has("python") {
        for pattern in [
            "/usr/lib/python3*/lib-dynload",
            "/usr/lib64/python3*/lib-dynload",
            "/usr/lib/python3/dist-packages",
            "/usr/lib/python3*/site-packages",
            "/usr/lib64/python3*/site-packages",
            "/usr/local/lib/python3*/dist-packages",
            "/usr/local/lib/python3*/site-packages",
        ] {
            for d in glob_one(pattern) {
                add(d);
            }
        }
    }
    // A directory inside another one is covered by the outer bind.
    let all: Vec<PathBuf> = dirs.into_iter().collect();
    all.iter()
        .filter(|d| !all.iter().any(|o| o != *d && d.starts_with(o)))
        .cloned()
        .collect()
}

/// The directories `/etc/ld.so.conf` lists, following `include` lines (a few levels deep).
fn ld_so_conf(file: &Path, depth: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(text) = std::fs::read_to_string(file) else {
        return out;
    };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include ") {
            if depth < 4 {
                let pattern = pattern.trim();
                let pattern = if pattern.starts_with('/') {
                    PathBuf::from(pattern)
                } else {
                    file.parent().unwrap_or(Path::new("/")).join(pattern)
                };
                for f in glob_one(&pattern.to_string_lossy()) {
                    out.extend(ld_so_conf(&f, depth + 1));
                }
            }
        } else if line.starts_with('/') {
            out.push(PathBuf::from(line));
        }
    }
    out
}

/// Paths matching `pattern`, whose `*`s may only be in its last two components (enough for
/// `/etc/ld.so.conf.d/*.conf` and `/usr/lib/python3*/lib-dynload`).
fn glob_one(pattern: &str) -> Vec<PathBuf> {
    fn matches(pat: &str, name: &str) -> bool {
        match pat.split_once('*') {
            None => pat == name,
            Some((pre, post)) => {
                name.len() >= pre.len() + post.len()
                    && name.starts_with(pre)
                    && name.ends_with(post)
            }
        }
    }
    let path = Path::new(pattern);
    let mut comps: Vec<String> = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let mut found = vec![PathBuf::from("/")];
    if comps.first().map(String::as_str) == Some("/") {
        comps.remove(0);
    }
    for comp in comps {
        let mut next = Vec::new();
        for base in &found {
            if comp.contains('*') {
                for e in std::fs::read_dir(base).into_iter().flatten().flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if matches(&comp, &name) {
                        next.push(base.join(name));
                    }
                }
            } else {
                let p = base.join(&comp);
                if p.exists() {
                    next.push(p);
                }
            }
        }
        found = next;
    }
    found.sort();
    found
}

/// The canonical file a command name resolves to in the system directories.
fn locate(name: &str) -> Option<PathBuf> {
    SEARCH
        .iter()
        .map(|d| Path::new(d).join(name))
        .find_map(|p| std::fs::canonicalize(&p).ok().filter(|c| is_executable(c)))
}

/// Adds `file` and, transitively, the interpreters the kernel opens to start it.
fn add_with_interpreters(file: &Path, out: &mut BTreeSet<PathBuf>) {
    let mut next = Some(file.to_path_buf());
    let mut depth = 0;
    while let Some(f) = next.take() {
        let Ok(canon) = std::fs::canonicalize(&f) else {
            return;
        };
        if !out.insert(canon.clone()) || depth > 4 {
            return;
        }
        depth += 1;
        next = elf::interpreter(&canon);
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

//! The versioned Tier-0 capability matrix, kept as data (one JSON file per version under
//! `classify/matrix/`) and embedded in the binary, so a pinned version classifies the same forever.

use super::reason::{RealExecReason, Toggle};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

/// Embedded matrix files, oldest first; the last one is the default.
const SOURCES: &[&str] = &[include_str!("../matrix/v1.json")];

/// How the matrix classifies one command name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Shipped in the Tier-0 image; `Some` when a runtime toggle gates it.
    Tier0(Option<Toggle>),
    /// A bash builtin or keyword: always Tier-0.
    Builtin,
    /// Needs a real execution tier.
    RealExec(RealExecReason),
}

/// The matrix file's shape (also what `--matrix-dump` prints).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatrixDoc {
    pub version: String,
    pub description: String,
    pub tier0: Tier0Doc,
    pub builtins: Vec<String>,
    pub needs_real_exec: BTreeMap<RealExecReason, Vec<String>>,
    pub python_modules_needing_real_exec: BTreeMap<String, RealExecReason>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tier0Doc {
    pub always: Vec<String>,
    pub network: Vec<String>,
    pub python: Vec<String>,
    pub javascript: Vec<String>,
}

/// A loaded matrix with its lookup table.
#[derive(Debug)]
pub struct Matrix {
    pub doc: MatrixDoc,
    entries: HashMap<String, Entry>,
}

impl Matrix {
    fn load(source: &str) -> Matrix {
        let doc: MatrixDoc = serde_json::from_str(source).expect("embedded matrix file is valid");
        let mut entries = HashMap::new();
        for name in &doc.builtins {
            entries.insert(name.clone(), Entry::Builtin);
        }
        let gated = [
            (&doc.tier0.always, None),
            (&doc.tier0.network, Some(Toggle::Network)),
            (&doc.tier0.python, Some(Toggle::Python)),
            (&doc.tier0.javascript, Some(Toggle::Javascript)),
        ];
        for (names, toggle) in gated {
            for name in names {
                entries.insert(name.clone(), Entry::Tier0(toggle));
            }
        }
        for (reason, names) in &doc.needs_real_exec {
            for name in names {
                entries.insert(name.clone(), Entry::RealExec(*reason));
            }
        }
        Matrix { doc, entries }
    }

    /// Looks a command name (already reduced to its basename) up.
    pub fn lookup(&self, name: &str) -> Option<Entry> {
        self.entries.get(name).copied()
    }

    /// What `python3 -m MODULE` needs, when the module is not Tier-0 work.
    pub fn python_module(&self, module: &str) -> Option<RealExecReason> {
        self.doc
            .python_modules_needing_real_exec
            .get(module)
            .copied()
    }

    /// Every executable the Tier-0 image must ship (builtins excluded).
    pub fn tier0_executables(&self) -> impl Iterator<Item = &str> {
        let t = &self.doc.tier0;
        t.always
            .iter()
            .chain(&t.network)
            .chain(&t.python)
            .chain(&t.javascript)
            .map(String::as_str)
    }

    pub fn version(&self) -> &str {
        &self.doc.version
    }
}

fn all() -> &'static [Matrix] {
    static ALL: OnceLock<Vec<Matrix>> = OnceLock::new();
    ALL.get_or_init(|| SOURCES.iter().map(|s| Matrix::load(s)).collect())
}

/// The matrix for a pinned version, or the newest one for `None`.
pub fn get(version: Option<&str>) -> Option<&'static Matrix> {
    let all = all();
    match version {
        None => all.last(),
        Some(v) => all.iter().find(|m| m.version() == v),
    }
}

/// All known versions, oldest first.
pub fn versions() -> Vec<&'static str> {
    all().iter().map(Matrix::version).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_matrix_loads_and_has_no_name_in_two_classes() {
        for source in SOURCES {
            let doc: MatrixDoc = serde_json::from_str(source).unwrap();
            let mut seen = std::collections::HashSet::new();
            let t = &doc.tier0;
            let names = t
                .always
                .iter()
                .chain(&t.network)
                .chain(&t.python)
                .chain(&t.javascript)
                .chain(doc.needs_real_exec.values().flatten());
            for name in names {
                assert!(
                    seen.insert(name.clone()),
                    "{name} is listed twice in {}",
                    doc.version
                );
            }
            for name in &doc.builtins {
                let clash = doc.needs_real_exec.values().flatten().any(|n| n == name);
                assert!(!clash, "builtin {name} also needs real exec");
            }
        }
    }

    #[test]
    fn newest_is_default_and_unknown_versions_are_none() {
        assert_eq!(get(None).unwrap().version(), *versions().last().unwrap());
        assert!(get(Some("v1")).is_some());
        assert!(get(Some("v999")).is_none());
    }
}

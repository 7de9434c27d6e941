//! What an adoption writes (the session's tokens and skills), checked whole before anything is
//! written and written all or nothing (issue 29: an adoption refused for a two-line token had
//! already written the token file, and left it with the attacker's text).
//!
//! The paths are the pooled worker's own: the token files where its own arguments say, the skills
//! under its `.agents`. An adoption's arguments never choose where anything is written.

use super::model::SkillFile;
use base64::Engine as _;
use std::collections::BTreeSet;
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// A skill that passed [`check_skills`]: a plain relative path and its decoded content.
#[derive(Debug, Clone)]
pub struct CheckedSkill {
    rel: PathBuf,
    bytes: Vec<u8>,
}

/// Checks every skill before any is written: each path plain and relative, none given twice,
/// none below another skill's file, every content base64.
pub fn check_skills(skills: &[SkillFile]) -> Result<Vec<CheckedSkill>, String> {
    let mut files = BTreeSet::new();
    let mut dirs = BTreeSet::new();
    let mut checked = Vec::with_capacity(skills.len());
    for skill in skills {
        let rel = Path::new(&skill.path);
        let plain = !skill.path.is_empty()
            && !skill.path.contains('\0')
            && rel.components().all(|c| matches!(c, Component::Normal(_)));
        if !plain {
            return Err(format!(
                "skill path {:?} is not a plain relative path",
                skill.path
            ));
        }
        let rel: PathBuf = rel.components().collect();
        if !files.insert(rel.clone()) {
            return Err(format!("skill path {:?} is given twice", skill.path));
        }
        dirs.extend(rel.ancestors().skip(1).map(Path::to_path_buf));
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&skill.content_base64)
            .map_err(|e| format!("skill {:?}: content is not base64: {e}", skill.path))?;
        checked.push(CheckedSkill { rel, bytes });
    }
    if let Some(both) = files.intersection(&dirs).next() {
        return Err(format!(
            "skill path {} is a file and the directory of another skill",
            both.display()
        ));
    }
    Ok(checked)
}

/// Writes the adoption's files: each token as a new file (mode 0400, never through a symlink,
/// never over an existing file), then each skill under `agents` (new files, mode 0444, their
/// directories created without following anything). If any write fails, everything written
/// before it is removed again, and the error says what failed.
pub fn write_all(
    tokens: &[(&Path, &str)],
    agents: &Path,
    skills: &[CheckedSkill],
) -> Result<(), String> {
    let mut written = Written::default();
    let result = (|| {
        for (path, token) in tokens {
            written.new_file(path, 0o400, token.as_bytes())?;
        }
        for skill in skills {
            let mut dir = agents.to_path_buf();
            if let Some(parent) = skill.rel.parent() {
                for part in parent.components() {
                    dir.push(part);
                    written.dir(&dir)?;
                }
            }
            written.new_file(&agents.join(&skill.rel), 0o444, &skill.bytes)?;
        }
        Ok(())
    })();
    if result.is_err() {
        written.undo();
    }
    result
}

/// What [`write_all`] made so far, in order.
#[derive(Default)]
struct Written {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Written {
    fn new_file(&mut self, path: &Path, mode: u32, content: &[u8]) -> Result<(), String> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| format!("creating {}: {e}", path.display()))?;
        // Made: removed again if anything fails from here on, this write included.
        self.files.push(path.to_path_buf());
        file.write_all(content)
            .map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// `dir` exists as a directory afterwards: made (mode 0755), or already one (never a
    /// symlink).
    fn dir(&mut self, dir: &Path) -> Result<(), String> {
        match DirBuilder::new().mode(0o755).create(dir) {
            Ok(()) => {
                self.dirs.push(dir.to_path_buf());
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let meta = std::fs::symlink_metadata(dir)
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                if meta.is_dir() {
                    Ok(())
                } else {
                    Err(format!("{} exists and is not a directory", dir.display()))
                }
            }
            Err(e) => Err(format!("creating {}: {e}", dir.display())),
        }
    }

    /// Removes what was made, files first, then directories deepest first (each only if empty).
    fn undo(self) {
        for file in self.files.iter().rev() {
            if let Err(e) = std::fs::remove_file(file) {
                tracing::warn!(path = %file.display(), "removing a file of a failed adoption: {e}");
            }
        }
        for dir in self.dirs.iter().rev() {
            if let Err(e) = std::fs::remove_dir(dir) {
                tracing::warn!(path = %dir.display(), "removing a directory of a failed adoption: {e}");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn skill(path: &str) -> SkillFile {
        SkillFile {
            path: path.into(),
            content_base64: "eA==".into(),
        }
    }

    #[test]
    fn skills_that_cannot_all_be_written_are_refused_before_any_is() {
        for bad in [
            vec![skill("a/SKILL.md"), skill("../x")],
            vec![skill("a/SKILL.md"), skill("/abs")],
            vec![skill("a/SKILL.md"), skill("a/./SKILL.md")],
            vec![skill("a/SKILL.md"), skill("a/SKILL.md")],
            vec![skill("a/SKILL.md"), skill("a/SKILL.md/b")],
            vec![skill("a/b"), skill("a")],
            vec![SkillFile {
                path: "a".into(),
                content_base64: "not base64!".into(),
            }],
        ] {
            assert!(check_skills(&bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            check_skills(&[skill("a/SKILL.md"), skill("a/more.md"), skill("b")])
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn a_write_that_fails_removes_what_was_written_before_it() {
        let tmp = tempfile::tempdir().unwrap();
        let agents = tmp.path().join("agents");
        std::fs::create_dir(&agents).unwrap();
        std::fs::create_dir(agents.join("taken")).unwrap();
        std::fs::write(agents.join("taken/SKILL.md"), "there").unwrap();
        let token = tmp.path().join("token");
        let skills = check_skills(&[skill("new/deep/SKILL.md"), skill("taken/SKILL.md")]).unwrap();
        let err = write_all(&[(&token, "t")], &agents, &skills).unwrap_err();
        assert!(err.contains("taken/SKILL.md"), "{err}");
        assert!(!token.exists());
        assert!(!agents.join("new").exists());
        assert_eq!(
            std::fs::read_to_string(agents.join("taken/SKILL.md")).unwrap(),
            "there"
        );
    }
}

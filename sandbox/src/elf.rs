//! What else the kernel must execute to start a file: the ELF program interpreter (the dynamic
//! loader) or a script's `#!` interpreter. Landlock checks EXECUTE on those too.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The interpreter `execve` opens for `path`, if any.
pub fn interpreter(path: &Path) -> Option<PathBuf> {
    let mut f = File::open(path).ok()?;
    let mut head = [0u8; 256];
    let n = read_up_to(&mut f, &mut head)?;
    let head = &head[..n];
    if head.starts_with(b"#!") {
        let line = head[2..].split(|&b| b == b'\n').next()?;
        let line = std::str::from_utf8(line).ok()?.trim();
        let interp = line.split_whitespace().next()?;
        return Some(PathBuf::from(interp));
    }
    if head.len() >= 64 && head.starts_with(b"\x7fELF") && head[5] == 1 {
        return pt_interp(&mut f, head);
    }
    None
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(n)
}

/// Reads PT_INTERP from a little-endian ELF32 or ELF64 file.
fn pt_interp(f: &mut File, head: &[u8]) -> Option<PathBuf> {
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]) as u64;
    let is64 = head[4] == 2;
    let (phoff, phentsize, phnum) = if is64 {
        (
            u64::from_le_bytes(head[32..40].try_into().ok()?),
            u16_at(54),
            u16_at(56),
        )
    } else {
        (
            u32::from_le_bytes(head[28..32].try_into().ok()?) as u64,
            u16_at(42),
            u16_at(44),
        )
    };
    if phentsize == 0 || phnum > 256 {
        return None;
    }
    let mut table = vec![0u8; (phentsize * phnum) as usize];
    f.seek(SeekFrom::Start(phoff)).ok()?;
    f.read_exact(&mut table).ok()?;
    for ph in table.chunks(phentsize as usize) {
        let kind = u32::from_le_bytes(ph[0..4].try_into().ok()?);
        if kind != 3 {
            continue;
        }
        let (off, size) = if is64 {
            (
                u64::from_le_bytes(ph[8..16].try_into().ok()?),
                u64::from_le_bytes(ph[32..40].try_into().ok()?),
            )
        } else {
            (
                u32::from_le_bytes(ph[4..8].try_into().ok()?) as u64,
                u32::from_le_bytes(ph[16..20].try_into().ok()?) as u64,
            )
        };
        if size == 0 || size > 4096 {
            return None;
        }
        let mut name = vec![0u8; size as usize];
        f.seek(SeekFrom::Start(off)).ok()?;
        f.read_exact(&mut name).ok()?;
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        let s = std::str::from_utf8(&name[..end]).ok()?;
        return Some(PathBuf::from(s));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_has_a_loader_and_scripts_have_their_shebang() {
        let bash = Path::new("/bin/bash");
        if bash.exists() {
            let interp = interpreter(bash).expect("bash is dynamically linked here");
            assert!(interp.to_string_lossy().contains("ld-"), "{interp:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/bin/sh -e\necho hi\n").unwrap();
        assert_eq!(interpreter(&script), Some(PathBuf::from("/bin/sh")));
        std::fs::write(&script, "plain text").unwrap();
        assert_eq!(interpreter(&script), None);
    }
}

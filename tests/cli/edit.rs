//! `cronsole edit` against what can be planted beside the jobs file or swapped in by the editor,
//! on the real binary: nothing planted is followed or opened, the copy is private (0600, a
//! random name), only a regular file of ours is read back (never a FIFO, a symlink or a hard
//! link to someone else's file, whose lines must not be printed), and the save replaces the
//! jobs file atomically (through its link when it is one).
#![allow(unsafe_code)] // signals, forks and polls real processes through libc

use crate::support;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

const SECRET: &str = "root:$6$SECRETHASH:19000:0:99999:7:::\n";

fn scratch(tag: &str) -> support::TempDir {
    let d = support::tempdir(&format!("edit-attack-{tag}"));
    let o = support::cli::cronsole(&d)
        .arg("init")
        .output()
        .expect("init");
    assert!(o.status.success(), "{o:?}");
    d
}

/// `cronsole edit` in `dir` with `editor` (a shell snippet, given the copy as `$1`), answering
/// `answers`; killed (and reported) if it has not ended within 20 s.
pub(super) fn edit(dir: &Path, editor: &str, answers: &str) -> Output {
    std::fs::write(dir.join("ed.sh"), editor).expect("write editor");
    let mut child = support::cli::command()
        .current_dir(dir)
        .arg("edit")
        .env_remove("VISUAL")
        .env("EDITOR", "sh ed.sh")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(answers.as_bytes())
        .expect("answers");
    let exited = support::wait::poll_until(Duration::from_secs(20), || {
        child.try_wait().expect("wait").is_some()
    });
    if !exited {
        let _ = child.kill();
        let out = child.wait_with_output().expect("output");
        panic!(
            "edit hung: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child.wait_with_output().expect("output")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".cronsole-"))
        .collect()
}

/// The old fixed copy path, planted as a symlink, a FIFO and a directory: each is left alone
/// (the symlink's target keeps its bytes), and the edit works.
#[test]
fn what_is_planted_at_the_old_copy_path_is_never_followed_or_opened() {
    let d = scratch("planted");
    let victim = d.join("victim");
    std::fs::write(&victim, "precious\n").expect("victim");
    let fixed = d.join(".cronsole-edit.jobs.yaml");
    std::os::unix::fs::symlink(&victim, &fixed).expect("symlink");
    let o = edit(&d, "sed -i 's/every 1m/every 2m/' \"$1\"\n", "y\n");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(
        std::fs::read_to_string(d.join("jobs.yaml"))
            .unwrap()
            .contains("every 2m")
    );
    std::fs::remove_file(&fixed).unwrap();

    // A FIFO and a leftover directory at the old path: neither hangs nor breaks the edit.
    let path = std::ffi::CString::new(fixed.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let o = edit(&d, "sed -i 's/every 2m/every 3m/' \"$1\"\n", "y\n");
    assert!(o.status.success(), "{}", text(&o));
    std::fs::remove_file(&fixed).unwrap();
    std::fs::create_dir(&fixed).unwrap();
    let o = edit(&d, "sed -i 's/every 3m/every 4m/' \"$1\"\n", "y\n");
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        std::fs::read_to_string(d.join("jobs.yaml"))
            .unwrap()
            .contains("every 4m")
    );
    std::fs::remove_dir(&fixed).unwrap();
    assert!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
}

/// The copy the editor gets is a regular file of ours, mode 0600, with a name nobody could
/// have guessed (two edits, two names).
#[test]
fn the_copy_is_private_with_a_random_name() {
    let d = scratch("private");
    let probe = "stat -c '%a %F' \"$1\" >> seen; basename \"$1\" >> names\n";
    for _ in 0..2 {
        let o = edit(&d, probe, "");
        assert!(o.status.success(), "{}", text(&o));
        assert!(text(&o).contains("no changes"), "{}", text(&o));
    }
    let seen = std::fs::read_to_string(d.join("seen")).unwrap();
    assert_eq!(seen, "600 regular file\n600 regular file\n", "{seen}");
    let names: Vec<String> = std::fs::read_to_string(d.join("names"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(names.len(), 2);
    assert_ne!(names[0], names[1], "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.starts_with(".cronsole-edit.") && n.ends_with(".jobs.yaml")),
        "{names:?}"
    );
    assert!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
}

/// An editor that swaps the copy for a symlink to a secret, a hard link to it, or a FIFO: the
/// edit is refused naming what the copy became, the secret's lines are never printed, nothing
/// hangs, and the jobs file is as before.
#[test]
fn a_copy_swapped_for_a_link_or_a_fifo_is_refused_without_printing_it() {
    let d = scratch("swap");
    let secret = d.join("shadow");
    std::fs::write(&secret, SECRET).expect("secret");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = std::fs::read_to_string(d.join("jobs.yaml")).unwrap();
    let cases = [
        ("rm \"$1\"; ln -s \"$PWD/shadow\" \"$1\"\n", "symbolic link"),
        ("rm \"$1\"; ln \"$PWD/shadow\" \"$1\"\n", "hard links"),
        ("rm \"$1\"; mkfifo \"$1\"\n", "is now a FIFO"),
        ("rm \"$1\"; mkdir \"$1\"\n", "is now a directory"),
    ];
    for (editor, why) in cases {
        let o = edit(&d, editor, "y\ny\n");
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{editor}: {out}");
        assert!(out.contains(why), "{editor}: {out}");
        assert!(out.contains("refusing to read it"), "{editor}: {out}");
        assert!(
            !out.contains("SECRETHASH"),
            "{editor}: the secret leaked: {out}"
        );
        assert_eq!(
            std::fs::read_to_string(d.join("jobs.yaml")).unwrap(),
            before
        );
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), SECRET);
        // A directory the editor made is not ours to remove recursively; the rest is gone.
        for left in leftovers(&d) {
            let p = d.join(&left);
            assert!(p.is_dir(), "left behind: {left}");
            std::fs::remove_dir(&p).unwrap();
        }
    }
}

/// A copy grown past the jobs file's size cap is refused before it is read whole.
#[test]
fn a_copy_over_the_size_cap_is_refused() {
    let d = scratch("cap");
    std::fs::write(
        d.join("ed.sh"),
        "head -c 5000 /dev/zero | tr '\\0' '#' >> \"$1\"\n",
    )
    .unwrap();
    let mut child = support::cli::command()
        .current_dir(d.path())
        .arg("edit")
        .env_remove("VISUAL")
        .env("EDITOR", "sh ed.sh")
        .env("CRONSOLE_MAX_JOBS_FILE_BYTES", "4096")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let _ = child.stdin.take();
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("more than the jobs-file cap of 4096 bytes"),
        "{}",
        text(&o)
    );
}

/// A jobs file that is a symlink is edited through it: the target is replaced atomically (a
/// new inode, the old mode), the link stays a link.
#[test]
fn a_symlinked_jobs_file_is_saved_to_its_target_and_stays_a_link() {
    let d = scratch("link");
    std::fs::create_dir(d.join("conf")).unwrap();
    std::fs::rename(d.join("jobs.yaml"), d.join("conf/real.yaml")).unwrap();
    std::fs::set_permissions(
        d.join("conf/real.yaml"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::os::unix::fs::symlink("conf/real.yaml", d.join("jobs.yaml")).unwrap();
    let ino = std::fs::metadata(d.join("conf/real.yaml")).unwrap().ino();
    let o = edit(&d, "sed -i 's/every 1m/every 5m/' \"$1\"\n", "y\n");
    assert!(o.status.success(), "{}", text(&o));
    let link = std::fs::symlink_metadata(d.join("jobs.yaml")).unwrap();
    assert!(link.file_type().is_symlink());
    let real = std::fs::metadata(d.join("conf/real.yaml")).unwrap();
    assert_ne!(
        real.ino(),
        ino,
        "replaced by rename, not rewritten in place"
    );
    assert_eq!(real.mode() & 0o777, 0o640);
    assert!(
        std::fs::read_to_string(d.join("conf/real.yaml"))
            .unwrap()
            .contains("every 5m")
    );
    assert!(leftovers(&d.join("conf")).is_empty());
}

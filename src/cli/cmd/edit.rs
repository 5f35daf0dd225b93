//! `cronsole edit`: edit a private copy of the jobs file, check it *as* the jobs file, show the
//! plan, and only on confirmation replace the jobs file atomically and apply it to the store.
//!
//! Owns: the edit copy's life (create, hand to the editor, read back, remove), the edit–check
//! loop, the plan and the atomic save. Must not touch: store internals (it speaks the `Store`
//! trait) or the engine.
//!
//! The copy lives in the jobs file's directory (relative paths and the editor's syntax mode
//! keep working) under a random name, created exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode
//! 0600): nothing planted there in advance — a symlink, a FIFO, a directory, a file left by an
//! earlier crash — is followed, opened or overwritten; a name that already exists is refused
//! with the path. After the editor exits, the copy is read back only if it is still a regular
//! file of ours (opened without following a symlink and without blocking on a FIFO, then
//! checked on the open descriptor: regular, one link, owned by us, under the jobs file's size
//! cap). Anything else is refused naming what it became, and none of its bytes are printed,
//! so an editor (or anyone) swapping the copy for a link to a secret file learns nothing.
//!
//! Saving writes the checked text to a second exclusive temp file beside the jobs file (the
//! original's mode, and its owner when we may set it), syncs it, renames it over the jobs file
//! and syncs the directory. A jobs file that is a symbolic link is edited through it: the link's
//! target is replaced and the link stays. The editor is `$VISUAL`, else `$EDITOR`, else `vi`,
//! run through `sh -c` so `EDITOR="code --wait"` works as it does for git. Answers are read from
//! stdin, so a script can drive it. Declining leaves the jobs file and the store as they were.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::args::Cli;
use crate::config;
use crate::model::JobDef;
use crate::store::{ApplyReport, Store};
use anyhow::{Context, Result};

use super::{apply_counts, apply_lines, bad_input, jobs_file, open_store, store_location};

/// What applying `jobs` to the store would do, as `apply` reports it once done.
fn plan_of(store: Option<&dyn Store>, jobs: &[JobDef]) -> Result<ApplyReport> {
    let stored = match store {
        Some(s) => s.jobs()?,
        None => Vec::new(),
    };
    let mut plan = ApplyReport::default();
    for def in jobs {
        match stored.iter().find(|r| r.def.name == def.name) {
            None => plan.created.push(def.name.clone()),
            Some(r) if r.def == *def && !r.rt.retired => plan.unchanged.push(def.name.clone()),
            Some(_) => plan.updated.push(def.name.clone()),
        }
    }
    for r in &stored {
        if !r.rt.retired && !jobs.iter().any(|d| d.name == r.def.name) {
            plan.retired.push(r.def.name.clone());
        }
    }
    Ok(plan)
}

/// How many job records `plan` changes.
fn changes(plan: &ApplyReport) -> usize {
    plan.created.len() + plan.updated.len() + plan.retired.len()
}

/// Ask a yes/no question on stdout, read the answer from stdin; `default` on an empty line.
fn ask(question: &str, default: bool) -> Result<bool> {
    print!("{question} [{}] ", if default { "Y/n" } else { "y/N" });
    std::io::stdout().flush().ok();
    let mut line = String::new();
    let n = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the answer")?;
    if n == 0 {
        // End of input: nobody to confirm, so nothing is done.
        println!();
        return Ok(false);
    }
    Ok(match line.trim().to_ascii_lowercase().as_str() {
        "" => default,
        "y" | "yes" => true,
        _ => false,
    })
}

fn run_editor(path: &Path) -> Result<()> {
    let editor = std::env::var("VISUAL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| {
            std::env::var("EDITOR")
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| "vi".to_string());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$@\""))
        .arg("sh")
        .arg(path)
        .status()
        .with_context(|| format!("starting the editor '{editor}'"))?;
    if !status.success() {
        anyhow::bail!("the editor '{editor}' exited with {status}; nothing was changed");
    }
    Ok(())
}

/// Removes a temp file however `edit` ends (whatever it has become: the link, not its target).
struct Temp(PathBuf);

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The file `edit` replaces: the jobs file, or the target of the link it is.
struct Target {
    /// The regular file that is replaced on save.
    real: PathBuf,
    /// Its directory (where the temp files go, so the rename stays on one file system).
    dir: PathBuf,
    /// Its file name (the temp names end with it, so editors pick the right mode).
    name: String,
}

fn target_of(file: &Path) -> Result<Target> {
    let meta = std::fs::symlink_metadata(file)
        .map_err(|e| bad_input(format!("cannot read {}: {e}", file.display())))?;
    let real = if meta.file_type().is_symlink() {
        std::fs::canonicalize(file).map_err(|e| {
            bad_input(format!(
                "{} is a symbolic link that does not resolve: {e}",
                file.display()
            ))
        })?
    } else {
        file.to_path_buf()
    };
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "jobs.yaml".to_string());
    let dir = real
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    Ok(Target { real, dir, name })
}

/// A new file in `dir` named `{prefix}{random}.{name}`, created exclusively, never through a
/// symlink, readable and writable by us alone.
fn create_private(dir: &Path, prefix: &str, name: &str) -> Result<(PathBuf, File)> {
    let path = dir.join(format!(
        "{prefix}{}.{name}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    ));
    let opened = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path);
    match opened {
        Ok(f) => Ok((path, f)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => anyhow::bail!(
            "refusing to use {}: something is already there (a leftover or a planted file); \
             nothing was changed",
            path.display()
        ),
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

/// What a file that is not a regular file is, in words.
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let ft = meta.file_type();
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// The edit copy's text, read only if it is still a regular file of ours of at most `cap`
/// bytes (see the module doc). The refusals never include the file's contents.
fn read_back(path: &Path, cap: u64) -> Result<String> {
    let refuse = |what: String| {
        bad_input(format!(
            "the edit copy {} {what}; refusing to read it (nothing was saved or applied)",
            path.display()
        ))
    };
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let f = match f {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refuse("was replaced by a symbolic link".into()));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse("was removed".into()));
        }
        Err(e) => return Err(refuse(format!("cannot be opened ({e})"))),
    };
    let meta = f
        .metadata()
        .with_context(|| format!("reading the edit copy {}", path.display()))?;
    if !meta.is_file() {
        return Err(refuse(format!("is now {}", kind_of(&meta))));
    }
    if meta.nlink() != 1 {
        return Err(refuse(format!(
            "has {} hard links (another file's contents)",
            meta.nlink()
        )));
    }
    let me = crate::proc::sys::euid();
    if meta.uid() != me {
        return Err(refuse(format!(
            "is owned by uid {}, not by this user",
            meta.uid()
        )));
    }
    let too_big = |size: String| {
        refuse(format!(
            "is {size} bytes, more than the jobs-file cap of {cap} bytes (raise it with {})",
            config::MAX_FILE_BYTES_ENV
        ))
    };
    if meta.len() > cap {
        return Err(too_big(meta.len().to_string()));
    }
    let mut bytes = Vec::new();
    f.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading the edit copy {}", path.display()))?;
    if bytes.len() as u64 > cap {
        return Err(too_big(format!("more than {cap}")));
    }
    String::from_utf8(bytes).map_err(|e| {
        refuse(format!(
            "is not valid UTF-8 text (at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Replace `t.real` with `text` atomically: an exclusive temp file beside it with the
/// original's mode (and owner, when we may set it), synced, renamed over it, the directory
/// synced.
fn save(t: &Target, text: &str) -> Result<()> {
    let orig =
        std::fs::metadata(&t.real).with_context(|| format!("reading {}", t.real.display()))?;
    let (staged, mut f) = create_private(&t.dir, ".cronsole-save.", &t.name)?;
    let staged = Temp(staged);
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", staged.0.display()))?;
    f.set_permissions(std::fs::Permissions::from_mode(orig.mode() & 0o7777))
        .with_context(|| format!("setting the mode of {}", staged.0.display()))?;
    let me = crate::proc::sys::euid();
    if orig.uid() != me || orig.gid() != f.metadata().map(|m| m.gid()).unwrap_or(orig.gid()) {
        // Root editing another user's file keeps it theirs; anyone else cannot change the
        // owner, and the file becomes theirs as with any editor that saves by rename.
        let _ = std::os::unix::fs::fchown(&f, Some(orig.uid()), Some(orig.gid()));
    }
    f.sync_all()
        .with_context(|| format!("syncing {}", staged.0.display()))?;
    drop(f);
    // Once renamed, the temp name is gone; the guard's removal then finds nothing.
    std::fs::rename(&staged.0, &t.real).with_context(|| format!("saving {}", t.real.display()))?;
    if let Ok(d) = File::open(&t.dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Keep `text` in a new file beside the jobs file (its name printed), never over anything.
fn keep_aside(t: &Target, text: &str) -> Result<PathBuf> {
    let (path, mut f) = create_private(&t.dir, "", &format!("cronsole-edit.{}", t.name))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("keeping your edit in {}", path.display()))?;
    Ok(path)
}

pub fn edit(cli: &Cli) -> Result<ExitCode> {
    let file = jobs_file(cli).ok_or_else(|| {
        bad_input("no jobs file: give --jobs FILE, or create jobs.yaml with `cronsole init`")
    })?;
    let original = config::read_text(&file).map_err(|d| bad_input(super::inert(&d)))?;
    let cap = config::max_file_bytes().map_err(bad_input)?;
    let target = target_of(&file)?;
    let (path, mut f) = create_private(&target.dir, ".cronsole-edit.", &target.name)?;
    let copy = Temp(path);
    f.write_all(original.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing the edit copy {}", copy.0.display()))?;
    drop(f);

    let (text, loaded) = loop {
        run_editor(&copy.0)?;
        let text = read_back(&copy.0, cap)?;
        if text == original {
            println!("no changes to {}", file.display());
            return Ok(ExitCode::SUCCESS);
        }
        // Checked as the jobs file itself: same path in messages, same directory for paths.
        let checked = config::check_str(&text, &file);
        for d in &checked.diagnostics {
            println!("{}", super::inert(d));
        }
        if !checked.has_errors() {
            break (text, checked.into_result());
        }
        if !ask("the file has errors; edit it again?", true)? {
            println!(
                "nothing changed: {} and the store are as before",
                file.display()
            );
            return Ok(ExitCode::from(2));
        }
    };
    let mut loaded = loaded.map_err(anyhow::Error::new)?;
    // Checked from text, it is still the jobs file at `file`: its directory is where commands
    // run and relative sink paths point, as `apply` and `run` store them, so saving an
    // unchanged settings block changes no stored setting.
    config::adjust_paths(&file, &mut loaded.file.settings);

    let location = store_location(cli, Some(&file));
    let existing = location.contains("://") || Path::new(&location).join("VERSION").exists();
    let store = if existing {
        Some(open_store(&location)?)
    } else {
        None
    };
    let plan = plan_of(store.as_deref(), &loaded.file.jobs)?;
    for line in apply_lines(&plan, true) {
        println!("{line}");
    }
    println!("plan: {}", apply_counts(&plan, true));
    let question = if changes(&plan) == 0 {
        format!("save {} (no job changes in the store)?", file.display())
    } else {
        format!("save {} and apply it to {location}?", file.display())
    };
    if !ask(&question, false)? {
        println!(
            "nothing changed: {} and the store are as before",
            file.display()
        );
        return Ok(ExitCode::from(1));
    }
    // Someone else changed the file while it was being edited: keep theirs, say so.
    let now_on_disk = config::read_text(&file).map_err(|d| bad_input(super::inert(&d)))?;
    if now_on_disk != original {
        let keep = keep_aside(&target, &text)?;
        anyhow::bail!(
            "{} changed on disk while you edited it; nothing was saved or applied (your version is in {})",
            file.display(),
            keep.display()
        );
    }
    save(&target, &text)?;
    let store = match store {
        Some(s) => s,
        None => open_store(&location)?,
    };
    let rep = store.apply(&loaded.file, super::storing_now(store.as_ref()))?;
    for r in &rep.recounted {
        println!("{}", super::recount_line(r));
    }
    println!(
        "saved {}; applied: {} ({})",
        file.display(),
        apply_counts(&rep, false),
        store.location()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_without_a_store_creates_everything() {
        let loaded = config::load_str(super::super::eco::STARTER, Path::new("jobs.yaml")).unwrap();
        let plan = plan_of(None, &loaded.file.jobs).unwrap();
        assert_eq!(plan.created, vec!["heartbeat".to_string()]);
        assert_eq!(changes(&plan), 1);
    }

    fn scratch(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("cronsole-edit-{tag}"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn the_copy_is_private_and_never_reuses_what_is_there() {
        let d = scratch("private");
        let (p, _f) = create_private(d.path(), ".cronsole-edit.", "jobs.yaml").unwrap();
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.is_file());
        assert_eq!(m.mode() & 0o777, 0o600);
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(".cronsole-edit.") && name.ends_with(".jobs.yaml"),
            "{name}"
        );
        let (q, _g) = create_private(d.path(), ".cronsole-edit.", "jobs.yaml").unwrap();
        assert_ne!(p, q, "a random name each time");
    }

    #[test]
    fn read_back_takes_only_a_regular_file_of_ours_under_the_cap() {
        let d = scratch("readback");
        let secret = d.path().join("secret");
        std::fs::write(&secret, "root:HASH:1:0:99999\n").unwrap();
        let copy = d.path().join("copy.yaml");

        std::os::unix::fs::symlink(&secret, &copy).unwrap();
        let e = read_back(&copy, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("symbolic link") && !e.contains("HASH"), "{e}");
        std::fs::remove_file(&copy).unwrap();

        std::fs::hard_link(&secret, &copy).unwrap();
        let e = read_back(&copy, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("hard links") && !e.contains("HASH"), "{e}");
        std::fs::remove_file(&copy).unwrap();

        let fifo = std::ffi::CString::new(copy.as_os_str().to_string_lossy().as_bytes()).unwrap();
        assert_eq!(crate::proc::sys::mkfifo(&fifo, 0o600), 0);
        let e = read_back(&copy, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("is now a FIFO"), "{e}");
        std::fs::remove_file(&copy).unwrap();

        std::fs::create_dir(&copy).unwrap();
        let e = read_back(&copy, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("is now a directory"), "{e}");
        std::fs::remove_dir(&copy).unwrap();

        std::fs::write(&copy, "0123456789").unwrap();
        let e = read_back(&copy, 9).unwrap_err().to_string();
        assert!(
            e.contains("is 10 bytes, more than the jobs-file cap of 9"),
            "{e}"
        );
        assert_eq!(read_back(&copy, 10).unwrap(), "0123456789");
    }

    #[test]
    fn save_replaces_a_symlinked_jobs_file_through_its_link_keeping_the_mode() {
        let d = scratch("save");
        let real = d.path().join("real.yaml");
        std::fs::write(&real, "old\n").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = d.path().join("jobs.yaml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let t = target_of(&link).unwrap();
        save(&t, "new\n").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new\n");
        assert_eq!(
            std::fs::metadata(&real).unwrap().mode() & 0o777,
            0o640,
            "the original's mode is kept"
        );
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".cronsole"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

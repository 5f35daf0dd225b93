//! `cronsole probe` as a process: output format and exit codes.

use crate::support;

fn cronsole(args: &[&str]) -> std::process::Output {
    support::cli::command()
        .args(args)
        .output()
        .expect("run cronsole")
}

#[test]
fn probe_command_prints_hash_size_and_preview() {
    let out = cronsole(&["probe", "--command", "echo hi"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout,
        "sha256: 98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4\n\
         size: 3 bytes\n\
         preview:\n\
         hi\n"
    );
}

#[test]
fn probe_preview_is_sanitised() {
    let out = cronsole(&["probe", "--command", "printf 'a\\033[2Jb\\n'"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.ends_with("preview:\na^[[2Jb\n"), "{stdout:?}");
    assert!(!stdout.contains('\x1b'));
}

#[test]
fn probe_of_a_failing_command_exits_1() {
    let out = cronsole(&["probe", "--command", "echo nope >&2; exit 3"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("probe failed: monitor command failed (exit 3: nope)"),
        "{stderr}"
    );
}

#[test]
fn probe_of_a_loopback_url_is_rejected_with_exit_2() {
    let out = cronsole(&["probe", "--url", "http://127.0.0.1/"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("probe rejected: address rejected: literal 127.0.0.1 is loopback (127/8)"),
        "{stderr}"
    );
    // The refusal names the way out for a source that is local on purpose.
    assert!(
        stderr.contains("`cronsole probe --allow-private`"),
        "{stderr}"
    );
}

#[test]
fn probe_rejects_bad_urls_and_arguments_with_exit_2() {
    for (args, needle) in [
        (
            vec!["probe", "--url", "file:///etc/passwd"],
            "scheme 'file' is not allowed",
        ),
        (
            vec!["probe", "--url", "https://user:pass@example.com/"],
            "must not contain credentials",
        ),
        (vec!["probe", "--url", "::nonsense"], "invalid URL"),
        (
            vec!["probe", "--command", "true", "--allow-private"],
            "--allow-private applies to --url only",
        ),
    ] {
        let out = cronsole(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn probe_url_ignores_environment_proxies() {
    use cronsole::testkit::hostile::{Behavior, HostileServer};
    let target = HostileServer::start(Behavior::Ok(b"direct\n".to_vec()))
        .await
        .unwrap();
    let proxy = HostileServer::start(Behavior::Ok(b"via proxy\n".to_vec()))
        .await
        .unwrap();
    let proxy_url = proxy.url("");
    let url = target.url("/");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_cronsole"))
        .args(["probe", "--url", &url, "--allow-private"])
        .env_remove("CRONSOLE_STORE")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env("HTTP_PROXY", &proxy_url)
        .env("http_proxy", &proxy_url)
        .env("HTTPS_PROXY", &proxy_url)
        .env("ALL_PROXY", &proxy_url)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("size: 7 bytes\npreview:\ndirect\n"),
        "{stdout}"
    );
    assert_eq!(target.connections(), 1);
    assert_eq!(proxy.connections(), 0, "the environment proxy was used");
}

/// A token in a monitor URL's query or path is not printed when the probe fails.
#[test]
fn probe_failure_does_not_print_the_url_token() {
    let out = cronsole(&[
        "probe",
        "--url",
        "http://127.0.0.1:1/PATHTOKEN123456/x?pw=MONPW444",
        "--allow-private",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("probe failed: request failed"), "{stderr}");
    assert!(
        !stderr.contains("MONPW444") && !stderr.contains("PATHTOKEN123456"),
        "{stderr}"
    );
}

/// A redirect's `Location` that carries the probed request (`next=<the request,
/// urlencoded>`), and a page that echoes it decoded, are printed with the URL's tokens redacted
/// in every form.
#[tokio::test]
async fn probe_redacts_the_url_tokens_a_server_echoes() {
    use cronsole::testkit::http::{Response, TestServer};
    let srv = TestServer::start(|req| {
        let quoted: String = req
            .path
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        if req.path.starts_with("/redir") {
            Response::new(302).header(
                "Location",
                &format!("https://login.example.com/sso?next={quoted}&state=S1"),
            )
        } else {
            let decoded = req.path.replace("%2B", "+").replace("%2F", "/");
            Response::text(200, &format!("hello {decoded}\n"))
        }
    })
    .await
    .unwrap();
    let run = |url: String| async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_cronsole"))
            .args(["probe", "--url", &url, "--allow-private"])
            .env_remove("CRONSOLE_STORE")
            .output()
            .await
            .unwrap()
    };
    let out = run(format!("{}/redir/PROBEPATHTOK27?pw=PROBEQTOK28", srv.url())).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(
            "redirect not followed: HTTP 302, Location: https://login.example.com/sso?next="
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("PROBEPATHTOK27") && !stderr.contains("PROBEQTOK28"),
        "{stderr}"
    );
    let out = run(format!("{}/page?pw=Pg%2BTok%2FSecret77", srv.url())).await;
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("hello [redacted]"), "{stdout}");
    assert!(!stdout.contains("Secret77"), "{stdout}");
}

//! PostgreSQL over TLS against a real server started with `ssl=on`, a test CA and a
//! `hostssl`-only `pg_hba.conf`: every libpq `sslmode`, `sslrootcert` as a
//! file and as `system` (through `SSL_CERT_FILE`), clear certificate errors for a wrong CA or
//! host name, client certificates, passwords from the URL / `PGPASSWORD` / pgpass, and no
//! password or key in any message.
#![allow(clippy::unwrap_used)] // test code

use crate::support;

use std::path::Path;

use cronsole::store::Store;
use cronsole::store::postgres::PgStore;

const PASSWORD: &str = "s3cret-tls-pw";

fn cli(store: &str, env: &[(&str, &str)], dir: &Path) -> (i32, String) {
    let mut cmd = support::cli::cronsole(dir);
    cmd.env_remove("PGPASSWORD")
        .env_remove("PGSSLMODE")
        .env_remove("PGSSLROOTCERT")
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .env("HOME", dir)
        .args(["--store", store, "jobs"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn tls_modes_against_a_hostssl_only_server() {
    let Some((cluster, files)) = support::pg::ssl_cluster(PASSWORD) else {
        return;
    };
    let dir = support::tempdir("pgtls");
    let port = cluster.port;
    let ca = files.ca_cert.display().to_string();
    let other = files.other_ca_cert.display().to_string();
    // The certificate names `localhost`; `hostaddr` pins the address so ::1 is never tried.
    let by_name = |q: &str| {
        format!("postgres://postgres:{PASSWORD}@localhost:{port}/postgres?hostaddr=127.0.0.1&{q}")
    };
    let by_ip = |q: &str| format!("postgres://postgres:{PASSWORD}@127.0.0.1:{port}/postgres?{q}");

    // The server really refuses plaintext: the positive cases below can only pass over TLS.
    let e = PgStore::open(&by_ip("sslmode=disable"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no encryption") || e.contains("pg_hba"), "{e}");
    assert!(!e.contains(PASSWORD), "password leaked: {e}");

    // require (no verification), prefer (the default) upgrade to TLS.
    for q in ["sslmode=require", "", "sslmode=prefer"] {
        let s = PgStore::open(&by_ip(q)).unwrap_or_else(|e| panic!("{q}: {e}"));
        assert!(s.jobs().unwrap().is_empty());
        assert!(!s.location().contains(PASSWORD));
    }

    // verify-full with the right CA and host name.
    let s = PgStore::open(&by_name(&format!("sslmode=verify-full&sslrootcert={ca}"))).unwrap();
    assert!(s.jobs().unwrap().is_empty());
    // verify-ca ignores the host name; verify-full does not.
    PgStore::open(&by_ip(&format!("sslmode=verify-ca&sslrootcert={ca}"))).unwrap();
    let e = PgStore::open(&by_ip(&format!("sslmode=verify-full&sslrootcert={ca}")))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("not valid for host name '127.0.0.1'"),
        "wrong host name must be named: {e}"
    );

    // A wrong CA, through the real binary: exit 1, the problem named, no password.
    let (code, out) = cli(
        &by_name(&format!("sslmode=verify-full&sslrootcert={other}")),
        &[],
        &dir,
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not signed by a trusted CA"), "{out}");
    assert!(out.contains(&other), "the roots checked are named: {out}");
    assert!(!out.contains(PASSWORD), "password leaked: {out}");
    // libpq: require with an explicit root certificate verifies the chain.
    let (code, out) = cli(
        &by_ip(&format!("sslmode=require&sslrootcert={other}")),
        &[],
        &dir,
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not signed by a trusted CA"), "{out}");

    // sslrootcert=system reads the OS store, which SSL_CERT_FILE replaces.
    let url = by_name("sslmode=verify-full&sslrootcert=system");
    let (code, out) = cli(&url, &[("SSL_CERT_FILE", &ca)], &dir);
    assert_eq!(code, 0, "{out}");
    let (code, out) = cli(&url, &[("SSL_CERT_FILE", &other)], &dir);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("the system's root certificates"), "{out}");

    // verify-full without any root certificate: bad input naming libpq's default file.
    let (code, out) = cli(&by_name("sslmode=verify-full"), &[], &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains(".postgresql/root.crt does not exist"), "{out}");

    // Passwords from PGPASSWORD and from a pgpass file.
    let bare = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=require");
    let (code, out) = cli(&bare, &[], &dir);
    assert_eq!(code, 1, "no password anywhere must fail: {out}");
    let (code, out) = cli(&bare, &[("PGPASSWORD", PASSWORD)], &dir);
    assert_eq!(code, 0, "{out}");
    let pgpass = dir.join(".pgpass");
    std::fs::write(&pgpass, format!("127.0.0.1:{port}:*:postgres:{PASSWORD}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, out) = cli(&bare, &[], &dir);
    assert_eq!(code, 0, "~/.pgpass: {out}");

    // A client certificate and key load and are presented; a key readable by others is
    // refused by path, and its contents never appear.
    let client_key = dir.join("client.key");
    std::fs::copy(&files.server_key, &client_key).unwrap();
    std::fs::set_permissions(&client_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let with_cert = by_ip(&format!(
        "sslmode=require&sslcert={}&sslkey={}",
        files.server_cert.display(),
        client_key.display()
    ));
    let (code, out) = cli(&with_cert, &[], &dir);
    assert_eq!(code, 0, "{out}");
    std::fs::set_permissions(&client_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, out) = cli(&with_cert, &[], &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("group or world access"), "{out}");
    let key_text = std::fs::read_to_string(&client_key).unwrap();
    let key_line = key_text.lines().nth(1).unwrap();
    assert!(!out.contains(key_line), "key material leaked: {out}");
}

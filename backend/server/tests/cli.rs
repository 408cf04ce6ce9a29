//! The `lockscope` binary's command line: help text, and bad configuration exiting 2 with every
//! problem listed.

use std::process::Command;

fn lockscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockscope"))
}

#[test]
fn help_describes_every_flag() {
    let out = lockscope().arg("--help").output().expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["serve", "check", "--help", "--version"] {
        assert!(text.contains(needle), "missing {needle} in:\n{text}");
    }
    let out = lockscope()
        .args(["serve", "--help"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["--config", "LOCKSCOPE_CONFIG", "--listen", "--log"] {
        assert!(text.contains(needle), "missing {needle} in:\n{text}");
    }
}

#[test]
fn bad_config_exits_2_listing_every_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        r#"
        listen = "127.0.0.1:7070"
        colour = "blue"
        [[zookeeper]]
        name = "has space"
        connect = "localhost"
        roots = ["locks"]
        "#,
    )
    .expect("write");
    for sub in ["serve", "check"] {
        let out = lockscope()
            .args([sub, "--config"])
            .arg(&path)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{sub}");
        let text = String::from_utf8_lossy(&out.stderr);
        for needle in [
            "colour",
            "has space",
            "\"localhost\" is not host:port",
            "\"locks\" is not an absolute",
        ] {
            assert!(text.contains(needle), "{sub}: missing {needle} in:\n{text}");
        }
    }
    let out = lockscope()
        .args(["serve", "--config", "/nonexistent/lockscope.toml"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn config_from_env_and_good_config_checks_ok() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ok.toml");
    std::fs::write(
        &path,
        "[[zookeeper]]\nname = \"zk\"\nconnect = \"127.0.0.1:2181\"\nroots = [\"/locks\"]\n",
    )
    .expect("write");
    let out = lockscope()
        .arg("check")
        .env("LOCKSCOPE_CONFIG", &path)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

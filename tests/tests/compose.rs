//! The compose demo cluster (`compose/`), validated without a Docker engine: Debian's
//! `docker-compose config` accepts the file, every file it mounts or builds from exists, the
//! Prometheus config passes `promtool check config` with the rules beside it (as mounted), the
//! lockscope config passes lockscope's own validation, and the Grafana provisioning points at
//! the shipped dashboards.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

#[test]
fn compose_file_is_valid_and_everything_it_mounts_exists() -> Result<()> {
    let root = repo();
    let compose = root.join("compose/docker-compose.yml");
    let out = std::process::Command::new("docker-compose")
        .arg("-f")
        .arg(&compose)
        .arg("config")
        .output()
        .context("docker-compose (scripts/install-deps installs Debian's)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "docker-compose config failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for service in [
        "zk1",
        "zk2",
        "zk3",
        "redis",
        "redlock1",
        "redlock2",
        "redlock3",
        "mariadb",
        "postgres",
        "lockscope",
        "workload",
        "prometheus",
        "grafana",
    ] {
        ensure!(
            text.contains(&format!("\n  {service}:\n")),
            "service {service} missing:\n{text}"
        );
    }
    // Host paths in the resolved file: bind mounts (`- /abs/host:/container`) and build contexts.
    let mut mounted = 0;
    for line in text.lines() {
        let line = line.trim().trim_start_matches("- ");
        let host = if let Some(rest) = line.strip_prefix("context: ") {
            Some(rest.to_string())
        } else if line.starts_with('/') {
            line.split(':').next().map(str::to_string)
        } else {
            None
        };
        if let Some(host) = host {
            ensure!(
                Path::new(&host).exists(),
                "compose refers to {host}, which does not exist"
            );
            mounted += 1;
        }
    }
    ensure!(mounted >= 6, "found only {mounted} host paths in:\n{text}");
    // The image runs the release archive's binary (the UI built in), nothing beside it.
    let dockerfile = std::fs::read_to_string(root.join("compose/Dockerfile"))?;
    ensure!(
        dockerfile.contains("scripts/release") && !dockerfile.contains("LOCKSCOPE_UI_DIR"),
        "compose/Dockerfile must build the image from scripts/release's archive:\n{dockerfile}"
    );
    ensure!(
        text.contains("ZOO_4LW_COMMANDS_WHITELIST: '*'")
            || text.contains("ZOO_4LW_COMMANDS_WHITELIST: \"*\""),
        "four-letter words must be on:\n{text}"
    );
    ensure!(
        text.contains("ZOO_ADMINSERVER_ENABLED: 'true'")
            || text.contains("ZOO_ADMINSERVER_ENABLED: \"true\"")
    );
    Ok(())
}

#[test]
fn compose_prometheus_config_passes_promtool_with_the_rules() -> Result<()> {
    let root = repo();
    // Mounted side by side in /etc/prometheus; do the same here.
    let dir = tempfile::tempdir()?;
    std::fs::copy(
        root.join("compose/prometheus.yml"),
        dir.path().join("prometheus.yml"),
    )?;
    std::fs::copy(
        root.join("dashboards/prometheus/alerts.yml"),
        dir.path().join("alerts.yml"),
    )?;
    let out = std::process::Command::new("promtool")
        .args(["check", "config", "prometheus.yml"])
        .current_dir(dir.path())
        .output()
        .context("promtool")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "{text}");
    ensure!(text.contains("SUCCESS: 20 rules found"), "{text}");
    Ok(())
}

#[test]
fn compose_lockscope_and_grafana_configs_are_consistent() -> Result<()> {
    let root = repo();
    let text = std::fs::read_to_string(root.join("compose/lockscope.toml"))?;
    let compose = std::fs::read_to_string(root.join("compose/docker-compose.yml"))?;
    // Database passwords come from the environment compose gives lockscope (`password_env`),
    // which parsing checks is set: set each as compose does.
    for line in text.lines() {
        if let Some(var) = line.trim().strip_prefix("password_env = ") {
            let var = var.trim_matches('"');
            let value = compose
                .lines()
                .find_map(|l| l.trim().strip_prefix(&format!("{var}: ")))
                .with_context(|| format!("compose does not set {var}"))?;
            std::env::set_var(var, value);
        }
    }
    let config = lockscope::Config::parse(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let tables: Vec<&str> = config.sources.iter().map(|s| s.at.as_str()).collect();
    ensure!(
        tables
            == [
                "zookeeper[0]",
                "redis[0]",
                "redlock[0]",
                "etcd[0]",
                "mysql[0]",
                "postgres[0]"
            ],
        "sources: {tables:?}"
    );
    ensure!(config.admin.enabled && config.store.configured());
    let datasource = std::fs::read_to_string(
        root.join("compose/grafana/provisioning/datasources/prometheus.yml"),
    )?;
    ensure!(datasource.contains("url: http://prometheus:9090"));
    let provider = std::fs::read_to_string(
        root.join("compose/grafana/provisioning/dashboards/lockscope.yml"),
    )?;
    ensure!(provider.contains("path: /var/lib/grafana/dashboards"));
    ensure!(compose.contains("../dashboards/grafana:/var/lib/grafana/dashboards"));
    // The workload's flags in compose are flags it has.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_lockscope-workload"))
        .arg("--help")
        .output()?;
    let help = String::from_utf8_lossy(&help.stdout);
    for line in compose.lines() {
        if let Some(flag) = line.trim().strip_prefix("- --") {
            let name = flag.split('=').next().unwrap_or(flag);
            ensure!(
                help.contains(&format!("--{name}")),
                "workload has no --{name}"
            );
        }
    }
    Ok(())
}

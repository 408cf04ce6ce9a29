//! A lock table's expiry column, whatever type it has: what the catalog says the column is
//! ([`catalog_query`], [`ExpiryKind::of_type`]) and the SQL each database needs to read it as
//! epoch milliseconds, to judge it passed against the server's clock and, for a force release,
//! to set it to now ([`ExpirySql`]). Owned here so that the collector's read and the release's
//! guarded update speak of one column the same way.
//!
//! Kinds: a real instant (PostgreSQL `timestamp with time zone`, MariaDB `TIMESTAMP`); a naive
//! time read as UTC (PostgreSQL `timestamp without time zone`, MariaDB `DATETIME`, `date`), as
//! Spring and Laravel's `now()` helpers in UTC applications write them; an integer (or numeric)
//! count of Unix seconds — the default for numbers, Laravel's `cache_locks.expiration`,
//! Symfony's `lock_keys.key_expiration` — or of milliseconds (`until_unit = "ms"`).

use crate::config::{Flavor, LockTableConfig};

/// How a lock table's expiry column keeps its instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryKind {
    /// An absolute instant (`timestamptz`, MariaDB `TIMESTAMP`).
    Instant,
    /// A date and time without a zone, read as UTC.
    NaiveUtc,
    /// A number of Unix seconds.
    EpochSeconds,
    /// A number of Unix milliseconds.
    EpochMillis,
}

/// `until_unit`: how a numeric expiry column counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UntilUnit {
    #[default]
    Seconds,
    Millis,
}

impl UntilUnit {
    pub fn parse(text: &str) -> Option<UntilUnit> {
        match text {
            "s" => Some(UntilUnit::Seconds),
            "ms" => Some(UntilUnit::Millis),
            _ => None,
        }
    }
}

impl ExpiryKind {
    /// The kind of a column whose type the catalog names `type_name` (PostgreSQL's
    /// `format_type`, MariaDB's `DATA_TYPE`), or the problem to report naming `table` and
    /// `column`.
    pub fn of_type(
        type_name: &str,
        unit: UntilUnit,
        table: &str,
        column: &str,
    ) -> Result<ExpiryKind, String> {
        let t = type_name.trim().to_ascii_lowercase();
        let base = t.split(['(', ' ']).next().unwrap_or_default();
        let number = |unit| match unit {
            UntilUnit::Seconds => ExpiryKind::EpochSeconds,
            UntilUnit::Millis => ExpiryKind::EpochMillis,
        };
        Ok(match t.as_str() {
            "timestamp with time zone" | "timestamp" => ExpiryKind::Instant,
            "timestamp without time zone" | "datetime" | "date" => ExpiryKind::NaiveUtc,
            _ => match base {
                "integer" | "bigint" | "smallint" | "int" | "mediumint" | "tinyint" | "numeric"
                | "decimal" | "double" | "real" | "float" => number(unit),
                _ => {
                    return Err(format!(
                        "{table}.{column}: the expiry column is of type {type_name}; lockscope \
                         reads timestamps (with or without time zone; without one read as UTC) \
                         or numbers of Unix seconds (until_unit = \"ms\" for milliseconds), so \
                         this table is not read"
                    ))
                }
            },
        })
    }

    /// Whether `until_unit` means anything for this kind.
    pub fn numeric(self) -> bool {
        matches!(self, ExpiryKind::EpochSeconds | ExpiryKind::EpochMillis)
    }
}

/// A string literal of `text` for `flavor` (MariaDB also escapes backslashes).
fn literal(flavor: Flavor, text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' if flavor == Flavor::Mysql => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The query answering the type of `table`'s expiry `column` (one row, one text column; no
/// row when the table or the column does not exist, which the table's read then reports).
pub fn catalog_query(flavor: Flavor, table: &LockTableConfig, column: &str) -> String {
    let parts = table.parts();
    match flavor {
        Flavor::Postgres => {
            let name = parts
                .iter()
                .map(|p| format!("\"{p}\""))
                .collect::<Vec<_>>()
                .join(".");
            format!(
                "SELECT format_type(atttypid, NULL) FROM pg_attribute \
                 WHERE attrelid = to_regclass({}) AND attname = {} AND NOT attisdropped",
                literal(flavor, &name),
                literal(flavor, column)
            )
        }
        Flavor::Mysql => {
            let (schema, name) = match parts.as_slice() {
                [schema, name] => (literal(flavor, schema), literal(flavor, name)),
                _ => ("DATABASE()".to_string(), literal(flavor, &table.table)),
            };
            format!(
                "SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = {schema} \
                 AND TABLE_NAME = {name} AND COLUMN_NAME = {}",
                literal(flavor, column)
            )
        }
    }
}

/// The SQL of one expiry column `column` (already quoted) of kind `kind` on `flavor`.
#[derive(Debug, Clone)]
pub struct ExpirySql {
    /// The column's instant as epoch milliseconds (a number).
    pub ms: String,
    /// The server's now as epoch milliseconds.
    pub now_ms: String,
    /// The value that sets the column to the server's now.
    pub set_now: String,
    /// The column as text, as the holder's version shows it and a release compares it.
    pub text: String,
}

impl ExpirySql {
    pub fn new(flavor: Flavor, kind: ExpiryKind, column: &str) -> Self {
        match flavor {
            Flavor::Postgres => {
                let now_ms = "ROUND(EXTRACT(EPOCH FROM now()) * 1000)".to_string();
                let (ms, set_now) = match kind {
                    // EXTRACT of a naive time is its nominal UTC epoch.
                    ExpiryKind::Instant => (
                        format!("ROUND(EXTRACT(EPOCH FROM {column}) * 1000)"),
                        "now()".to_string(),
                    ),
                    ExpiryKind::NaiveUtc => (
                        format!("ROUND(EXTRACT(EPOCH FROM {column}) * 1000)"),
                        "(now() AT TIME ZONE 'UTC')".to_string(),
                    ),
                    ExpiryKind::EpochSeconds => (
                        format!("ROUND({column}::numeric * 1000)"),
                        "FLOOR(EXTRACT(EPOCH FROM now()))".to_string(),
                    ),
                    ExpiryKind::EpochMillis => {
                        (format!("ROUND({column}::numeric)"), now_ms.clone())
                    }
                };
                ExpirySql {
                    ms,
                    now_ms,
                    set_now,
                    text: format!("{column}::text"),
                }
            }
            Flavor::Mysql => {
                let now_ms = "ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000)".to_string();
                let (ms, set_now) = match kind {
                    ExpiryKind::Instant => (
                        format!("ROUND(UNIX_TIMESTAMP({column}) * 1000)"),
                        "NOW(3)".to_string(),
                    ),
                    // Not UNIX_TIMESTAMP, which reads a DATETIME in the session's time zone.
                    ExpiryKind::NaiveUtc => (
                        format!(
                            "ROUND(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {column}) / 1000)"
                        ),
                        "UTC_TIMESTAMP(3)".to_string(),
                    ),
                    ExpiryKind::EpochSeconds => {
                        (format!("({column} * 1000)"), "UNIX_TIMESTAMP()".to_string())
                    }
                    ExpiryKind::EpochMillis => (format!("({column} + 0)"), now_ms.clone()),
                };
                ExpirySql {
                    ms,
                    now_ms,
                    set_now,
                    text: format!("CAST({column} AS CHAR)"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_types_map_to_kinds() {
        let kind = |t: &str, unit| ExpiryKind::of_type(t, unit, "t", "c");
        assert_eq!(
            kind("timestamp with time zone", UntilUnit::Seconds),
            Ok(ExpiryKind::Instant)
        );
        assert_eq!(
            kind("timestamp without time zone", UntilUnit::Seconds),
            Ok(ExpiryKind::NaiveUtc)
        );
        assert_eq!(
            kind("timestamp", UntilUnit::Seconds),
            Ok(ExpiryKind::Instant)
        );
        assert_eq!(
            kind("datetime", UntilUnit::Seconds),
            Ok(ExpiryKind::NaiveUtc)
        );
        assert_eq!(
            kind("integer", UntilUnit::Seconds),
            Ok(ExpiryKind::EpochSeconds)
        );
        assert_eq!(
            kind("bigint", UntilUnit::Millis),
            Ok(ExpiryKind::EpochMillis)
        );
        assert_eq!(
            kind("int", UntilUnit::Seconds),
            Ok(ExpiryKind::EpochSeconds)
        );
        assert_eq!(
            kind("numeric(20,0)", UntilUnit::Seconds),
            Ok(ExpiryKind::EpochSeconds)
        );
        let problem = kind("character varying", UntilUnit::Seconds).expect_err("text is no expiry");
        assert!(problem.starts_with("t.c: "), "{problem}");
        assert!(problem.contains("character varying"), "{problem}");
    }

    #[test]
    fn literals_are_quoted_for_each_database() {
        assert_eq!(literal(Flavor::Postgres, "a'b\\c"), "'a''b\\c'");
        assert_eq!(literal(Flavor::Mysql, "a'b\\c"), "'a''b\\\\c'");
    }
}

//! Plain-text tables, psql style, for the listing commands.

use std::io::Write;

use tokio_postgres::{Client, SimpleQueryMessage};

use crate::CliError;

/// Prints `header` and `rows` as an aligned table; cells that look like numbers are
/// right-aligned. Write errors (a closed pipe) are ignored.
pub fn print(header: &[String], rows: &[Vec<String>]) {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", render(header, rows));
    let _ = out.flush();
}

/// The table as text, ending with `(N rows)`.
pub fn render(header: &[String], rows: &[Vec<String>]) -> String {
    let n = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let numeric = |s: &str| !s.is_empty() && s.parse::<f64>().is_ok();
    let mut s = String::new();
    let line = |cells: &[String], s: &mut String| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pad = width[i].saturating_sub(c.chars().count());
                if numeric(c) {
                    format!("{}{}", " ".repeat(pad), c)
                } else {
                    format!("{}{}", c, " ".repeat(pad))
                }
            })
            .collect();
        s.push(' ');
        s.push_str(parts.join(" | ").trim_end());
        s.push('\n');
    };
    let centred: Vec<String> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let pad = width[i].saturating_sub(h.chars().count());
            format!("{}{}{}", " ".repeat(pad / 2), h, " ".repeat(pad - pad / 2))
        })
        .collect();
    line(&centred, &mut s);
    s.push_str(&width.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("+"));
    s.push('\n');
    for r in rows {
        line(r, &mut s);
    }
    s.push_str(&format!("({} row{})\n", rows.len(), if rows.len() == 1 { "" } else { "s" }));
    s
}

/// Runs a parameterless query in the simple protocol (every value comes back as text) and
/// returns its column names and rows; NULL is shown empty.
pub async fn query_text(client: &Client, sql: &str) -> Result<(Vec<String>, Vec<Vec<String>>), CliError> {
    let mut header = Vec::new();
    let mut rows = Vec::new();
    for msg in client.simple_query(sql).await? {
        match msg {
            SimpleQueryMessage::RowDescription(cols) => {
                header = cols.iter().map(|c| c.name().to_string()).collect();
            }
            SimpleQueryMessage::Row(r) => {
                if header.is_empty() {
                    header = r.columns().iter().map(|c| c.name().to_string()).collect();
                }
                rows.push((0..r.len()).map(|i| r.get(i).unwrap_or("").to_string()).collect());
            }
            _ => {}
        }
    }
    Ok((header, rows))
}

/// Column names and text values of rows from the extended protocol (columns cast to text).
pub fn rows_text(rows: &[tokio_postgres::Row]) -> (Vec<String>, Vec<Vec<String>>) {
    let header = rows
        .first()
        .map(|r| r.columns().iter().map(|c| c.name().to_string()).collect())
        .unwrap_or_default();
    let body = rows
        .iter()
        .map(|r| (0..r.len()).map(|i| r.get::<_, Option<String>>(i).unwrap_or_default()).collect())
        .collect();
    (header, body)
}

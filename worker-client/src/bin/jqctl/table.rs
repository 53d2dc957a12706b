//! Output of the listing commands, the one place jqctl renders them: psql-style text tables
//! that fit [`WIDTH`] columns (the default), every column (`--wide`), or JSON Lines (`--json`).
//!
//! A listing ([`Listing`]) names its columns ([`Col`]) with two SQL expressions each: the
//! table cell's text and the JSON value. PostgreSQL produces both (`::text`, `to_json`), so
//! values keep their types (numbers, booleans, `null`, jsonb as JSON, timestamps as RFC 3339
//! strings, intervals as seconds) and serde_json writes the lines: no escaping by hand.

use std::io::Write;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

use crate::{CliError, CliResult};

/// The width a default table fits in, in characters (worker-client/tests/listings.rs measures it).
pub const WIDTH: usize = 100;

/// `--json` / `--wide`, shared by every listing command.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct Format {
    /// One JSON object per line (JSON Lines), every column, values typed: numbers, booleans,
    /// null, jsonb as JSON, timestamps as RFC 3339 strings, intervals as seconds.
    #[arg(long, conflicts_with = "wide")]
    pub json: bool,
    /// Every column, cells not truncated (the default table shows the first columns an
    /// operator needs and fits 100 characters).
    #[arg(long)]
    pub wide: bool,
}

/// Where a column shows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Show {
    /// The default table, `--wide` and `--json`.
    Always,
    /// `--wide` and `--json`.
    Wide,
    /// `--json` only (the table shows the value in another column).
    Json,
}

/// One column of a listing: its name (the table header and the JSON key) and how to get it.
#[derive(Clone, Debug)]
pub struct Col {
    key: &'static str,
    text: String,
    json: String,
    show: Show,
    /// Text columns the default table may shrink to this many characters (cut with `…`).
    shrink: Option<usize>,
}

impl Col {
    /// The column `key`, as text in the table and as its own type in JSON.
    pub fn new(key: &'static str) -> Col {
        Col { key, text: format!("{key}::text"), json: key.to_string(), show: Show::Always, shrink: None }
    }

    /// A timestamptz column: `YYYY-MM-DD HH:MM:SS` in the table, RFC 3339 in JSON.
    pub fn time(key: &'static str) -> Col {
        Col::new(key).text(&format!("to_char({key}, 'YYYY-MM-DD HH24:MI:SS')"))
    }

    /// An interval column: PostgreSQL's text in the table, seconds (a number) in JSON.
    pub fn secs(key: &'static str) -> Col {
        Col::new(key).json(&format!("extract(epoch FROM {key})::float8"))
    }

    /// The column's name: its table header and JSON key.
    pub fn key(&self) -> &'static str {
        self.key
    }

    /// The SQL expression of the table cell (any type; sent through `::text`).
    pub fn text(mut self, sql: &str) -> Col {
        self.text = format!("({sql})::text");
        self
    }

    /// The SQL expression of the JSON value (sent through `to_json`).
    pub fn json(mut self, sql: &str) -> Col {
        self.json = sql.to_string();
        self
    }

    /// Shown with `--wide` and `--json` only.
    pub fn wide(mut self) -> Col {
        self.show = Show::Wide;
        self
    }

    /// In JSON only.
    pub fn json_only(mut self) -> Col {
        self.show = Show::Json;
        self
    }

    /// A long text the default table cuts down to `min` characters or more, with `…`.
    pub fn shrink(mut self, min: usize) -> Col {
        self.shrink = Some(min);
        self
    }

    fn shown(&self, fmt: Format) -> bool {
        match self.show {
            Show::Always => true,
            Show::Wide => fmt.wide || fmt.json,
            Show::Json => fmt.json,
        }
    }
}

/// A parameter of a listing's query, sent as the given type.
pub type Param = (Box<dyn ToSql + Sync + Send>, Type);

/// A listing: `SELECT <columns> <from>`, with `from` holding FROM, WHERE, ORDER BY and LIMIT
/// (parameters `$1`…) and the columns in display order.
pub struct Listing {
    from: String,
    cols: Vec<Col>,
    params: Vec<Param>,
}

impl Listing {
    /// A listing without parameters.
    pub fn new(from: &str, cols: Vec<Col>) -> Listing {
        Listing { from: from.to_string(), cols, params: Vec::new() }
    }

    /// Adds parameter `$n` (n = the number of parameters so far + 1).
    pub fn param<T: ToSql + Sync + Send + 'static>(mut self, value: T, ty: Type) -> Listing {
        self.params.push((Box::new(value), ty));
        self
    }

    fn shown(&self, fmt: Format) -> Vec<&Col> {
        self.cols.iter().filter(|c| c.shown(fmt)).collect()
    }

    /// Runs the query (unnamed statement: works through a pooler) with one expression per
    /// column; NULL is None.
    async fn fetch(&self, client: &Client, exprs: Vec<String>) -> Result<Vec<Vec<Option<String>>>, CliError> {
        let sql = format!("SELECT {} {}", exprs.join(", "), self.from);
        let params: Vec<(&(dyn ToSql + Sync), Type)> =
            self.params.iter().map(|(v, t)| (&**v as &(dyn ToSql + Sync), t.clone())).collect();
        let rows = client.query_typed(&sql, &params).await?;
        Ok(rows.iter().map(|r| (0..r.len()).map(|i| r.get::<_, Option<String>>(i)).collect()).collect())
    }

    /// Every column of every row as one JSON object each (`{"key":value,…}`, keys in column
    /// order), each ending with the `extra` members (key, JSON text made by this module).
    pub async fn json_objects(&self, client: &Client, extra: &[(&str, String)]) -> Result<Vec<String>, CliError> {
        let cols = self.shown(Format { json: true, wide: false });
        let exprs = cols.iter().map(|c| format!("to_json({})::text", c.json)).collect();
        let rows = self.fetch(client, exprs).await?;
        rows.iter()
            .map(|r| object(cols.iter().map(|c| c.key).zip(r.iter().map(|v| json_value(v.as_deref()))), extra))
            .collect()
    }

    /// The header and the text cells of the columns `fmt` shows, each with its shrink limit.
    pub async fn text_rows(&self, client: &Client, fmt: Format) -> Result<Table, CliError> {
        let cols = self.shown(fmt);
        let rows = self.fetch(client, cols.iter().map(|c| c.text.clone()).collect()).await?;
        Ok(Table {
            header: cols.iter().map(|c| c.key.to_string()).collect(),
            // Never narrower than the header.
            shrink: cols.iter().map(|c| c.shrink.filter(|_| !fmt.wide).map(|m| m.max(c.key.len()))).collect(),
            rows: rows.into_iter().map(|r| r.into_iter().map(|v| v.unwrap_or_default()).collect()).collect(),
        })
    }

    /// The listing as `fmt` prints it: JSON Lines, or a table (ending with `(N rows)`).
    pub async fn render(&self, client: &Client, fmt: Format) -> Result<String, CliError> {
        if fmt.json {
            let mut s = String::new();
            for line in self.json_objects(client, &[]).await? {
                s.push_str(&line);
                s.push('\n');
            }
            return Ok(s);
        }
        let table = self.text_rows(client, fmt).await?;
        Ok(table.render(if fmt.wide { None } else { Some(WIDTH) }))
    }

    /// Prints the listing as `fmt` asks.
    pub async fn print(&self, client: &Client, fmt: Format) -> CliResult {
        out(&self.render(client, fmt).await?);
        Ok(())
    }
}

/// Writes `text` to stdout; write errors (a closed pipe) are ignored.
pub fn out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// A JSON value from PostgreSQL's `to_json(…)::text` (NULL: `null`).
fn json_value(text: Option<&str>) -> Result<serde_json::Value, CliError> {
    match text {
        None => Ok(serde_json::Value::Null),
        Some(t) => serde_json::from_str(t).map_err(|e| CliError(format!("the server sent invalid JSON: {e}"))),
    }
}

/// `{"k1":v1,…}` with the keys in the given order, then `extra` (key, JSON text already
/// written by this module) appended; keys and values written by serde_json.
fn object<'a>(
    entries: impl Iterator<Item = (&'a str, Result<serde_json::Value, CliError>)>,
    extra: &[(&str, String)],
) -> Result<String, CliError> {
    let mut parts = Vec::new();
    for (k, v) in entries {
        parts.push(format!("{}:{}", serde_json::Value::from(k), v?));
    }
    for (k, raw) in extra {
        parts.push(format!("{}:{raw}", serde_json::Value::from(*k)));
    }
    Ok(format!("{{{}}}", parts.join(",")))
}

/// Text cells of a listing, ready to render.
pub struct Table {
    pub header: Vec<String>,
    /// Per column: the least width it may be cut down to to fit (None: never cut).
    pub shrink: Vec<Option<usize>>,
    pub rows: Vec<Vec<String>>,
}

/// `s` on one line: every run of whitespace or control characters becomes one space.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for c in s.chars() {
        if c.is_whitespace() || c.is_control() {
            if !space {
                out.push(' ');
            }
            space = true;
        } else {
            out.push(c);
            space = false;
        }
    }
    out
}

/// `s` cut to `width` characters, the last one `…` when cut.
pub fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// Column widths that fit `budget` characters per line (" a | b" and the "---+---" rule,
/// which is one character longer): the widest shrinkable column loses a character until the
/// line fits or every shrinkable one is at its limit.
fn fit(natural: &[usize], shrink: &[Option<usize>], budget: Option<usize>) -> Vec<usize> {
    let mut width = natural.to_vec();
    let Some(budget) = budget.filter(|_| !no_fit()) else { return width };
    let line = |w: &[usize]| w.iter().sum::<usize>() + 3 * w.len() - 1;
    while line(&width) > budget {
        let widest = (0..width.len())
            .filter(|&i| shrink[i].is_some_and(|m| width[i] > m))
            .max_by_key(|&i| (width[i], std::cmp::Reverse(i)));
        match widest {
            Some(i) => width[i] -= 1,
            None => break,
        }
    }
    width
}

/// Negative control only (feature `test-breaks`, `JQ_CLIENT_BREAK=no_fit`): tables ignore the
/// width budget (worker-client/tests/listings.rs must then fail).
fn no_fit() -> bool {
    cfg!(feature = "test-breaks") && std::env::var("JQ_CLIENT_BREAK").is_ok_and(|v| v == "no_fit")
}

impl Table {
    /// The table as text, ending with `(N rows)`; with a budget, every line fits it when
    /// the columns that may not shrink do. Cells are put on one line; numbers right-aligned.
    pub fn render(&self, budget: Option<usize>) -> String {
        let n = self.header.len();
        let rows: Vec<Vec<String>> = self.rows.iter().map(|r| r.iter().take(n).map(|c| one_line(c)).collect()).collect();
        let mut natural: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                natural[i] = natural[i].max(c.chars().count());
            }
        }
        // A cell wider than the whole line is cut anyway: the fit starts from there.
        if let Some(b) = budget {
            for (w, s) in natural.iter_mut().zip(&self.shrink) {
                if s.is_some() {
                    *w = (*w).min(b);
                }
            }
        }
        let width = fit(&natural, &self.shrink, budget);
        let numeric = |s: &str| !s.is_empty() && s.parse::<f64>().is_ok();
        let mut s = String::new();
        let line = |cells: &[String], centre: bool, s: &mut String| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let c = cut(c, width[i]);
                    let pad = width[i].saturating_sub(c.chars().count());
                    if centre {
                        format!("{}{}{}", " ".repeat(pad / 2), c, " ".repeat(pad - pad / 2))
                    } else if numeric(&c) {
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
        line(&self.header, true, &mut s);
        s.push_str(&width.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("+"));
        s.push('\n');
        for r in &rows {
            line(r, false, &mut s);
        }
        s.push_str(&format!("({} row{})\n", rows.len(), if rows.len() == 1 { "" } else { "s" }));
        s
    }
}

/// One record as `field: value` lines (a multi-line value on indented lines below its name),
/// each line cut to `budget` characters when given.
pub fn fields(header: &[String], row: &[String], budget: Option<usize>) -> String {
    let fit = |l: String| match budget {
        Some(b) => cut(&l, b),
        None => l,
    };
    let mut s = String::new();
    for (name, v) in header.iter().zip(row) {
        if v.contains('\n') {
            s.push_str(&fit(format!("{name}:")));
            s.push('\n');
            for l in v.lines() {
                let l: String = l.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
                s.push_str(&fit(format!("  {}", l.trim_end())));
                s.push('\n');
            }
        } else {
            s.push_str(&fit(format!("{name}: {}", one_line(v)).trim_end().to_string()));
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: Vec<Vec<&str>>, shrink: Vec<Option<usize>>) -> Table {
        Table {
            header: (0..shrink.len()).map(|i| format!("c{i}")).collect(),
            shrink,
            rows: rows.into_iter().map(|r| r.into_iter().map(String::from).collect()).collect(),
        }
    }

    #[test]
    fn a_long_cell_is_cut_to_fit_the_budget() {
        let long = "x".repeat(300);
        let t = table(vec![vec!["12345", &long, "a\nb"]], vec![None, Some(5), Some(5)]);
        let text = t.render(Some(40));
        for l in text.lines() {
            assert!(l.chars().count() <= 40, "{l:?}");
        }
        assert!(text.contains("x…"), "{text}");
        assert!(text.contains("a b"), "{text}");
        assert!(t.render(None).contains(&long));
    }

    #[test]
    fn cut_keeps_short_text() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
    }
}
